//! Recording what a reconcile found: each change in the store's drift
//! table and in `cmcp_reconcile_missed_changes_total{connection,kind}`.

use cmcp_registry::{SpaceChange, Store};
use tracing::info;

use crate::error::Result;

/// The counter of changes no webhook delivered, by connection and kind.
pub const MISSED_CHANGES: &str = "cmcp_reconcile_missed_changes_total";

/// Describe the worker's metrics to whatever recorder the process runs.
pub fn describe() {
    metrics::describe_counter!(
        MISSED_CHANGES,
        "Changes a reconcile found that no webhook had delivered, by connection and kind"
    );
}

/// Store a reconcile's changes and count them.
pub async fn record(
    store: &Store,
    connection_id: &str,
    run_id: &str,
    changes: &[SpaceChange],
) -> Result<()> {
    store.record_drift(connection_id, run_id, changes).await?;
    for c in changes {
        metrics::counter!(MISSED_CHANGES, "connection" => connection_id.to_owned(), "kind" => c.kind.as_str())
            .increment(1);
    }
    info!(
        missed = changes.len(),
        "reconcile recorded the changes webhooks missed"
    );
    Ok(())
}
