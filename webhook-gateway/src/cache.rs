//! The gateway's copy of each connection's platform, status and webhook
//! secrets, so that a delivery costs no read before its write.
//!
//! A copy is trusted for at most `connection_cache_ttl`, and it never
//! decides alone: the statement that stores a delivery re-checks, against
//! the committed rows, that the connection still takes deliveries and that
//! the secret which verified it is still valid (`cmcp_registry::Premise`).
//! So for a fleet of gateways:
//!
//! - a connection disabled anywhere gets no delivery stored from the moment
//!   that change commits; a gateway holding an older copy reads the body,
//!   finds the write refused as stale, reads the connection again and
//!   answers 401, and it answers 401 before reading the body once its copy
//!   is renewed;
//! - a rotation elsewhere: a delivery signed with the new secret fails
//!   against the old copy, which is then read again once before the answer
//!   (so a forgery costs one read, as it did without a cache); an old
//!   secret whose overlap was cut short is refused by the write's check;
//! - an overlap that ends on its own is applied from the copy, which keeps
//!   each secret's end of validity.
//!
//! Only connections that take deliveries are kept: an unknown or disabled
//! one is read again on every request, so one enabled again is taken at
//! once, and requests naming made-up connections cannot fill the map.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cmcp_domain::{ConnectionStatus, Platform};
use cmcp_registry::{Cipher, IntakeState, RegistryError, Store};

use crate::verify::WebhookSecret;

/// A bound far above any real registry's connection count; past it the map
/// starts over rather than grow.
const MAX_ENTRIES: usize = 100_000;

/// A connection as last read.
pub(crate) struct Known {
    pub platform: Platform,
    pub status: ConnectionStatus,
    /// Row id, secret and end of validity (`None`: current), current first.
    secrets: Vec<(i64, WebhookSecret, Option<i64>)>,
    read_at: Instant,
}

impl Known {
    fn from_state(state: IntakeState) -> Known {
        Known {
            platform: state.platform,
            status: state.status,
            secrets: state
                .secrets
                .iter()
                .map(|s| (s.id, WebhookSecret::from_token(&s.secret), s.valid_until))
                .collect(),
            read_at: Instant::now(),
        }
    }

    /// Whether deliveries for `platform` are taken on this connection.
    pub(crate) fn takes(&self, platform: Platform) -> bool {
        self.platform == platform && self.status.reads()
    }

    /// The secrets valid at `now_ms`, and their row ids in the same order.
    pub(crate) fn secrets_at(&self, now_ms: i64) -> (Vec<WebhookSecret>, Vec<i64>) {
        self.secrets
            .iter()
            .filter(|(_, _, until)| until.is_none_or(|u| u > now_ms))
            .map(|(id, s, _)| (s.clone(), *id))
            .unzip()
    }
}

/// What a lookup found.
pub(crate) struct Lookup {
    /// `None`: no such connection.
    pub known: Option<Arc<Known>>,
    /// Whether it came from the cache (and may be worth reading again
    /// before a refusal).
    pub cached: bool,
}

pub(crate) struct ConnectionCache {
    ttl: Duration,
    entries: Mutex<HashMap<String, Arc<Known>>>,
}

impl ConnectionCache {
    /// A cache trusting copies for `ttl`; zero keeps nothing.
    pub(crate) fn new(ttl: Duration) -> ConnectionCache {
        ConnectionCache {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Known>>> {
        // A panic while holding the lock leaves a map that is still valid.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The connection from the cache while its copy is young enough, else
    /// read from the store.
    pub(crate) async fn get(
        &self,
        store: &Store,
        cipher: &Cipher,
        connection: &str,
    ) -> Result<Lookup, RegistryError> {
        let hit = self
            .entries()
            .get(connection)
            .filter(|k| k.read_at.elapsed() < self.ttl)
            .cloned();
        if let Some(known) = hit {
            return Ok(Lookup {
                known: Some(known),
                cached: true,
            });
        }
        Ok(Lookup {
            known: self.read(store, cipher, connection).await?,
            cached: false,
        })
    }

    /// Read the connection from the store now, keeping the copy when it
    /// takes deliveries and dropping any older one otherwise.
    pub(crate) async fn read(
        &self,
        store: &Store,
        cipher: &Cipher,
        connection: &str,
    ) -> Result<Option<Arc<Known>>, RegistryError> {
        let known = store
            .intake_state(cipher, connection)
            .await?
            .map(|s| Arc::new(Known::from_state(s)));
        let mut entries = self.entries();
        match &known {
            Some(k) if k.status.reads() && !self.ttl.is_zero() => {
                if entries.len() >= MAX_ENTRIES {
                    entries.clear();
                }
                entries.insert(connection.to_owned(), k.clone());
            }
            _ => {
                entries.remove(connection);
            }
        }
        Ok(known)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_past_its_overlap_is_not_offered() {
        let known = Known {
            platform: Platform::Github,
            status: ConnectionStatus::Enabled,
            secrets: vec![
                (2, WebhookSecret::from("new"), None),
                (1, WebhookSecret::from("old"), Some(1_000)),
            ],
            read_at: Instant::now(),
        };
        assert_eq!(known.secrets_at(999).1, vec![2, 1]);
        assert_eq!(known.secrets_at(1_000).1, vec![2]);
        assert!(known.takes(Platform::Github));
        assert!(!known.takes(Platform::Jira));
    }
}
