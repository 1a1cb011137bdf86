//! Sign-in attempts per client address: at most [`ATTEMPTS`] a
//! [`WINDOW`], so an admin key cannot be guessed at line speed. The
//! address is the TCP peer the listener saw (`ConnectInfo`, put there by
//! `cmcp_webhook_gateway::listen::serve`); a request without one (a router
//! called without a socket) is not limited. Counts live in this process:
//! each gateway limits its own clients.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const ATTEMPTS: u32 = 10;
pub const WINDOW: Duration = Duration::from_secs(60);
/// Addresses remembered at most; past it, stale ones are dropped first.
const TRACKED: usize = 10_000;

#[derive(Debug, Default)]
pub struct SignInLimiter {
    seen: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

impl SignInLimiter {
    /// Count an attempt from `ip`; false when it is over the limit.
    pub fn allow(&self, ip: IpAddr, now: Instant) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() >= TRACKED {
            seen.retain(|_, (since, _)| now.duration_since(*since) < WINDOW);
        }
        let entry = seen.entry(ip).or_insert((now, 0));
        if now.duration_since(entry.0) >= WINDOW {
            *entry = (now, 0);
        }
        entry.1 += 1;
        entry.1 <= ATTEMPTS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_a_minute_per_address() {
        let l = SignInLimiter::default();
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t = Instant::now();
        for _ in 0..ATTEMPTS {
            assert!(l.allow(a, t));
        }
        assert!(!l.allow(a, t), "the eleventh in the window");
        assert!(l.allow(b, t), "another address has its own count");
        assert!(l.allow(a, t + WINDOW), "a new window");
    }
}
