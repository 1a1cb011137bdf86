//! Retention: the `[retention]` section and the pruning the `prune`
//! schedule runs. The defaults keep a week of history, and delivery rows
//! (with their outcomes, bodies gone after a week) 90 days.

use std::time::Duration;

use cmcp_registry::{PruneBefore, Pruned, Store};
use serde::Deserialize;
use tracing::info;

use crate::error::Result;

#[derive(Debug, Clone, serde::Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Bodies of processed and ignored deliveries go after this; the row
    /// and its outcome stay.
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub keep_delivery_bodies: Duration,
    /// Rows of processed and ignored deliveries go after this (failed ones
    /// stay for a replay); the dedupe of a redelivery older than this is
    /// the re-read's idempotence.
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub keep_deliveries: Duration,
    /// Sync runs (and the drift they recorded) go after this.
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub keep_runs: Duration,
    /// Finished jobs of both queue backends go after this.
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub keep_finished_jobs: Duration,
    /// Page-cache rows not refreshed for this long have expired.
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub keep_page_cache: Duration,
    /// Change-feed rows go after this. A client whose cursor is older is
    /// answered 410 (and its manifest diff whole), so it re-reads the
    /// manifest instead of missing changes.
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub keep_changes: Duration,
}

const WEEK: Duration = Duration::from_secs(7 * 24 * 3600);

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            keep_delivery_bodies: WEEK,
            keep_deliveries: Duration::from_secs(90 * 24 * 3600),
            keep_runs: WEEK,
            keep_finished_jobs: WEEK,
            keep_page_cache: WEEK,
            keep_changes: WEEK,
        }
    }
}

impl RetentionConfig {
    /// The cut-offs at `now_ms`.
    pub fn before(&self, now_ms: i64) -> PruneBefore {
        let ago =
            |d: Duration| now_ms.saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        PruneBefore {
            delivery_bodies: ago(self.keep_delivery_bodies),
            deliveries: ago(self.keep_deliveries),
            runs: ago(self.keep_runs),
            finished_jobs: ago(self.keep_finished_jobs),
            page_cache: ago(self.keep_page_cache),
            changes: ago(self.keep_changes),
        }
    }
}

/// Prune what the configuration no longer keeps, as of `now_ms`.
pub async fn prune(store: &Store, cfg: &RetentionConfig, now_ms: i64) -> Result<Pruned> {
    let pruned = store.prune(&cfg.before(now_ms)).await?;
    info!(
        delivery_bodies = pruned.delivery_bodies,
        deliveries = pruned.deliveries,
        runs = pruned.runs,
        finished_jobs = pruned.finished_jobs,
        page_cache_rows = pruned.page_cache_rows,
        changes = pruned.changes,
        "retention pruned"
    );
    Ok(pruned)
}
