//! A direct read answered 404/410. That is deletion only on the word of a
//! connection with the authority to say so: one that may write the space,
//! whose sighting of it is active, and whose credential still reads the
//! container (the org, workspace, site or drive). Anything less is lost
//! access: the connection's sighting says so and the space is kept.

use cmcp_connectors::Connector;
use cmcp_domain::SpaceAddress;
use cmcp_registry::{Store, TombstoneOutcome};
use tracing::info;

use crate::error::Result;

/// Tombstone `address` if `connection_id` (reading through `connector`)
/// has the authority; otherwise its sighting becomes `access-lost`.
pub async fn confirm_gone(
    store: &Store,
    connector: &dyn Connector,
    connection_id: &str,
    address: &SpaceAddress,
) -> Result<TombstoneOutcome> {
    // Kept typed: the job decides on the error's retry intent.
    let readable = connector.container_readable().await?;
    let outcome = store.tombstone(connection_id, address, readable).await?;
    if let TombstoneOutcome::Refused(why) = outcome {
        info!(
            connection_id,
            %address,
            why = why.as_str(),
            "404 without the authority to call it gone; the space is kept"
        );
    }
    Ok(outcome)
}

/// The connection lost sight of `address` (made private, removed from an
/// installation): never a deletion, whatever a re-read answers.
pub async fn lose_access(store: &Store, connection_id: &str, address: &SpaceAddress) -> Result<()> {
    if store.lose_access(connection_id, address).await? {
        info!(connection_id, %address, "access lost; the space is kept");
    }
    Ok(())
}
