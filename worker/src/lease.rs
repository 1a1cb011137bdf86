//! The connection lease as one guard: acquire, renew in the background,
//! release when the work ends, and a flag that says whether it was lost.
//!
//! Why one guard: every piece of work that writes a connection's catalogue
//! (a full sync, the Drive change-feed pass) must hold the lease for its
//! whole length, or a second worker starts the same work and the two
//! overwrite each other's marks. A hand-rolled acquire/release pair once
//! forgot the renewal, so a pass longer than the TTL lost its lease
//! silently. With [`ConnectionLease`] the renewal starts with the lease and
//! stops with it.
//!
//! The lease is not re-entrant: a holder that already holds it is refused
//! like anyone else, so two jobs of one worker never run one connection at
//! once. A caller that is refused defers; it never touches the holder's run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cmcp_registry::{LeaseAttempt, Store};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::error::Result;

/// Renewals per TTL: a renewal may be late twice before the lease lapses.
const RENEWALS_PER_TTL: u32 = 3;
/// The shortest renewal period, so a tiny test TTL does not spin.
const MIN_RENEW_EVERY: Duration = Duration::from_millis(50);

/// Someone holds the connection's lease (possibly this very worker).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHeld {
    pub holder: String,
    /// When the holder's lease lapses unless it renews it (epoch ms).
    pub until_ms: i64,
}

/// A held lease on one connection, renewed in the background until it is
/// released or dropped.
#[derive(Debug)]
pub struct ConnectionLease {
    store: Store,
    connection_id: String,
    holder: String,
    lost: Arc<AtomicBool>,
    renewer: Option<JoinHandle<()>>,
}

fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}

/// How often a lease of `ttl` is renewed.
pub fn renew_every(ttl: Duration) -> Duration {
    (ttl / RENEWALS_PER_TTL).max(MIN_RENEW_EVERY)
}

impl ConnectionLease {
    /// Takes the lease of `connection_id` for `holder`, or says who holds
    /// it. On success the renewal runs until [`ConnectionLease::release`]
    /// (or drop).
    pub async fn acquire(
        store: &Store,
        connection_id: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<std::result::Result<ConnectionLease, LeaseHeld>> {
        match store
            .try_acquire_lease(connection_id, holder, ttl_ms(ttl))
            .await?
        {
            LeaseAttempt::HeldBy { holder, until_ms } => Ok(Err(LeaseHeld { holder, until_ms })),
            LeaseAttempt::Acquired => {
                let lost = Arc::new(AtomicBool::new(false));
                let renewer = tokio::spawn(renew(
                    store.clone(),
                    connection_id.to_owned(),
                    holder.to_owned(),
                    ttl,
                    lost.clone(),
                ));
                Ok(Ok(ConnectionLease {
                    store: store.clone(),
                    connection_id: connection_id.to_owned(),
                    holder: holder.to_owned(),
                    lost,
                    renewer: Some(renewer),
                }))
            }
        }
    }

    /// True once a renewal found the lease taken by another holder: the
    /// work must not record anything that assumes it ran alone (missing
    /// marks, feed positions).
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// The flag behind [`ConnectionLease::is_lost`], for code that only
    /// needs to read it.
    pub fn lost_flag(&self) -> &AtomicBool {
        &self.lost
    }

    pub fn connection_id(&self) -> &str {
        &self.connection_id
    }

    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// Stops the renewal and frees the connection now. A release that fails
    /// is logged: the lease then lapses after its TTL.
    pub async fn release(mut self) {
        self.stop_renewing();
        if let Err(e) = self
            .store
            .release_lease(&self.connection_id, &self.holder)
            .await
        {
            warn!(connection_id = %self.connection_id, error = %e, "could not release the sync lease; it will lapse");
        }
    }

    fn stop_renewing(&mut self) {
        if let Some(r) = self.renewer.take() {
            r.abort();
        }
    }
}

impl Drop for ConnectionLease {
    /// A lease dropped without [`ConnectionLease::release`] (an early return
    /// on an error) is released in the background rather than left to
    /// lapse.
    fn drop(&mut self) {
        let Some(renewer) = self.renewer.take() else {
            return;
        };
        renewer.abort();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, id, holder) = (
            self.store.clone(),
            self.connection_id.clone(),
            self.holder.clone(),
        );
        runtime.spawn(async move {
            if let Err(e) = store.release_lease(&id, &holder).await {
                warn!(connection_id = %id, error = %e, "could not release the sync lease; it will lapse");
            }
        });
    }
}

async fn renew(
    store: Store,
    connection_id: String,
    holder: String,
    ttl: Duration,
    lost: Arc<AtomicBool>,
) {
    let every = renew_every(ttl);
    loop {
        tokio::time::sleep(every).await;
        match store
            .renew_lease(&connection_id, &holder, ttl_ms(ttl))
            .await
        {
            Ok(true) => {}
            Ok(false) => {
                warn!(connection_id, holder, "sync lease lost to another worker");
                lost.store(true, Ordering::SeqCst);
                return;
            }
            // A missed renewal is not yet a lost lease: two more tries fit
            // in the TTL.
            Err(e) => warn!(connection_id, error = %e, "could not renew the sync lease"),
        }
    }
}

/// Logs a refused lease the same way for every caller.
pub fn log_deferral(held: &LeaseHeld) {
    info!(holder = %held.holder, until_ms = held.until_ms, "connection is being synced; deferring");
}

/// How long a refused job waits before trying again: until the holder's
/// lease would lapse, but no longer than one renewal period, since a holder
/// that finishes releases the lease long before its `until_ms`.
pub fn deferral_delay(until_ms: i64, ttl: Duration) -> Duration {
    let left_ms = until_ms.saturating_sub(chrono::Utc::now().timestamp_millis());
    Duration::from_millis(u64::try_from(left_ms).unwrap_or(0)).min(renew_every(ttl))
}
