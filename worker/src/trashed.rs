//! Trashed is not deleted: a Drive folder in the trash (restorable for 30
//! days) leaves the listing exactly like a deleted one. A reconcile reads
//! each space its complete listing lacked by id: one the platform reports
//! trashed is applied as such (the space stays, marked `trashed`, like a
//! Jira project in the recycle bin) and counts as seen; anything else is
//! left to the listing's verdict (missing), so a transfer or lost access
//! is never dressed up as present.

use cmcp_connectors::{Connector, ReadOutcome};
use cmcp_domain::{RunFigures, SpaceAddress};
use cmcp_registry::{ConnectionRow, SpaceChange};
use tracing::{info, warn};

use crate::error::Result;
use crate::sync::SyncContext;

/// Read by id the connection's seen spaces that the listing lacked — at
/// most `max_missing` of them, the most the breaker lets go at once — and
/// keep the trashed ones.
pub async fn recheck_unseen(
    ctx: &SyncContext,
    connection: &ConnectionRow,
    run_id: &str,
    connector: &dyn Connector,
    figures: &mut RunFigures,
    mut drift: Option<&mut Vec<SpaceChange>>,
) -> Result<()> {
    let preview = ctx
        .store
        .missing_preview_of_run(&connection.id, run_id)
        .await?;
    let limit = usize::try_from(ctx.sync.max_missing).unwrap_or(usize::MAX);
    if preview.would_miss.len() > limit {
        // The breaker will hold the connection; reading them all would
        // only spend the budget.
        return Ok(());
    }
    let mut trashed = 0u64;
    for text in &preview.would_miss {
        let Ok(address) = text.parse::<SpaceAddress>() else {
            continue;
        };
        let record = match connector.read(&address).await {
            Ok(ReadOutcome::Found(record)) if record.state.trashed => record,
            Ok(_) => continue,
            Err(e) => {
                warn!(%address, error = %e, "reconcile: could not read an unlisted space");
                continue;
            }
        };
        let (stats, changes) = ctx
            .store
            .apply_listed_page(&connection.id, &connection.owner, run_id, &[record])
            .await?;
        figures.updated += stats.updated + stats.renamed;
        if let Some(d) = drift.as_deref_mut() {
            d.extend(changes);
        }
        trashed += 1;
    }
    if trashed > 0 {
        info!(
            trashed,
            "reconcile: unlisted spaces are in the trash, not gone"
        );
    }
    Ok(())
}
