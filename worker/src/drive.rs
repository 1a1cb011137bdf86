//! Google Drive incremental sync: apply a drive's changes feed instead of
//! re-listing the domain, through the same `Store::apply_page` path as a
//! full sync.
//!
//! Positions: [`run_full`] reads each drive's `changes.getStartPageToken`
//! *before* the full listing and records the tokens only when the listing
//! was complete, so nothing that changed during the listing is skipped
//! (replaying a change is harmless: upserts are keyed on stable ids).
//! [`run_incremental`] then reads each drive's feed from its token and
//! stores `newStartPageToken` only after the changes are applied.
//!
//! Every changed folder is re-read by id (`files.get`, and its parents for
//! the path) rather than trusted from the feed: the path alias needs the
//! parents anyway, and a re-read is the current truth. A `removed` entry
//! (or a trashed file) may only mean lost access, so a folder is tombstoned
//! only when the direct read answers 404; one still readable is kept (with
//! its trashed state). A rename or move changes the paths of everything
//! below, which the feed does not report: those descendants are re-read too.
//!
//! Limits, left to the next full sync: shared drives created since the last
//! full listing have no position yet; a folder moved out of the configured
//! depth stays as it was.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use cmcp_connectors::drive::{DriveConnector, FolderRead, model};
use cmcp_domain::{
    AliasKind, Platform, RunFigures, RunOutcome, SpaceAddress, SpaceRecord, SpaceStatus,
};
use cmcp_registry::{ConnectionRow, SpaceFilter};
use tracing::{info, instrument, warn};

use crate::error::{Result, WorkerError};
use crate::lease::ConnectionLease;
use crate::sync::{SyncContext, SyncOutcome, run_sync};

/// What one incremental pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IncrementalReport {
    pub run_id: String,
    /// Drives whose feed was read.
    pub drives: u64,
    /// Feed entries read (before collapsing repeats of one file).
    pub changes: u64,
    pub created: u64,
    pub updated: u64,
    pub renamed: u64,
    pub unchanged: u64,
    /// Confirmed gone by a 404 on a direct read.
    pub tombstoned: u64,
    /// `removed`/trashed entries whose folder still reads: kept.
    pub kept: u64,
    /// Entries that are not folders, or lie deeper than the depth.
    pub skipped: u64,
}

#[derive(Debug, Clone)]
pub enum IncrementalOutcome {
    /// No positions were stored yet: a full sync ran instead (and recorded
    /// them if it was complete).
    FullSync(SyncOutcome),
    Applied(IncrementalReport),
    /// Another worker holds the connection until `until_ms`.
    Deferred {
        holder: String,
        until_ms: i64,
    },
}

async fn drive_connector(ctx: &SyncContext, connection: &ConnectionRow) -> Result<DriveConnector> {
    if connection.platform != Platform::Drive {
        return Err(WorkerError::Sync {
            connection_id: connection.id.clone(),
            detail: format!("{} is not a Drive connection", connection.id),
        });
    }
    let token = ctx
        .store
        .connection_token(&ctx.cipher, &connection.id)
        .await?;
    Ok(DriveConnector::from_connection(
        &connection.spec(),
        &connection.settings,
        token,
        &ctx.http,
    )?)
}

/// A full sync of a Drive connection that also records where each drive's
/// changes feed starts (see the module docs for the order).
#[instrument(skip_all, fields(connection_id = %connection_id))]
pub async fn run_full(
    ctx: &SyncContext,
    connection_id: &str,
    trigger: &str,
) -> Result<SyncOutcome> {
    let connection = ctx.store.get_connection(connection_id).await?;
    let connector = drive_connector(ctx, &connection).await?;
    let counters = cmcp_connectors::common::http::Counters::default();
    let mut tokens = Vec::new();
    match connector.list_drives(&counters).await {
        Ok(drives) => {
            for d in drives {
                match connector.start_page_token(&d.id).await {
                    Ok(t) => tokens.push((d.id, t)),
                    Err(e) => {
                        warn!(drive = %d.id, error = %e, "no start page token; that drive waits for the next full sync")
                    }
                }
            }
        }
        Err(e) => warn!(error = %e, "could not read start page tokens before the listing"),
    }
    let result = run_sync(ctx, connection_id, trigger).await?;
    if let SyncOutcome::Complete { .. } = &result {
        ctx.store
            .set_drive_page_tokens(connection_id, &tokens)
            .await?;
    }
    Ok(result)
}

/// Applies every drive's changes since its stored position; runs a full
/// sync first when there is none. What the webhook gateway calls for a
/// Drive `change` notification.
#[instrument(skip_all, fields(connection_id = %connection_id))]
pub async fn run_incremental(ctx: &SyncContext, connection_id: &str) -> Result<IncrementalOutcome> {
    let positions = ctx.store.drive_page_tokens(connection_id).await?;
    if positions.is_empty() {
        return Ok(IncrementalOutcome::FullSync(
            run_full(ctx, connection_id, "drive-changes").await?,
        ));
    }
    let lease =
        match ConnectionLease::acquire(&ctx.store, connection_id, &ctx.holder, ctx.sync.lease_ttl)
            .await?
        {
            Ok(lease) => lease,
            Err(held) => {
                crate::lease::log_deferral(&held);
                return Ok(IncrementalOutcome::Deferred {
                    holder: held.holder,
                    until_ms: held.until_ms,
                });
            }
        };
    let result = incremental_under_lease(ctx, connection_id, positions, &lease).await;
    lease.release().await;
    result.map(IncrementalOutcome::Applied)
}

async fn incremental_under_lease(
    ctx: &SyncContext,
    connection_id: &str,
    positions: Vec<cmcp_registry::DrivePageToken>,
    lease: &ConnectionLease,
) -> Result<IncrementalReport> {
    let started = Instant::now();
    let connection = ctx.store.get_connection(connection_id).await?;
    let run_id = ctx
        .store
        .start_run(connection_id, "drive-changes", &ctx.holder)
        .await?;
    let mut report = IncrementalReport {
        run_id: run_id.clone(),
        ..IncrementalReport::default()
    };
    let mut figures = RunFigures::default();
    let outcome = async {
        let connector = drive_connector(ctx, &connection).await?;
        for p in &positions {
            let batch = connector.changes(&p.drive_id, &p.page_token).await?;
            figures.pages += batch.figures.pages;
            figures.requests += batch.figures.requests;
            figures.retries += batch.figures.retries;
            report.drives += 1;
            report.changes += batch.changes.len() as u64;
            apply_changes(ctx, &connection, &connector, batch.changes, &mut report).await?;
            // Another holder may be reading the same feed: moving the
            // position now could skip what it has not applied yet.
            if lease.is_lost() {
                return Err(WorkerError::Sync {
                    connection_id: connection_id.to_owned(),
                    detail: "sync lease lost mid-pass; feed positions left as they were".to_owned(),
                });
            }
            ctx.store
                .set_drive_page_token(connection_id, &p.drive_id, &batch.new_start_page_token)
                .await?;
        }
        Ok::<(), WorkerError>(())
    }
    .await;
    figures.items_seen = report.changes;
    figures.created = report.created;
    figures.updated = report.updated;
    figures.renamed = report.renamed;
    figures.unchanged = report.unchanged;
    figures.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let (run_outcome, error) = match &outcome {
        Ok(()) => (RunOutcome::Complete, None),
        Err(e) => (RunOutcome::Failed, Some(e.to_string())),
    };
    ctx.store
        .finish_run(&run_id, run_outcome, &figures, error.as_deref())
        .await?;
    outcome?;
    info!(?report, "drive changes applied");
    Ok(report)
}

async fn apply(
    ctx: &SyncContext,
    connection: &ConnectionRow,
    records: &[SpaceRecord],
    report: &mut IncrementalReport,
) -> Result<()> {
    let stats = ctx
        .store
        .apply_page(&connection.id, &connection.owner, records)
        .await?;
    report.created += stats.created;
    report.updated += stats.updated;
    report.renamed += stats.renamed;
    report.unchanged += stats.unchanged;
    Ok(())
}

/// The active path alias of a space, to tell whether a re-read moved it.
async fn current_path(ctx: &SyncContext, address: &SpaceAddress) -> Result<Option<String>> {
    Ok(ctx
        .store
        .alias_history(address)
        .await?
        .into_iter()
        .find(|a| a.is_active() && a.kind == AliasKind::Path)
        .map(|a| a.value))
}

fn path_of(record: &SpaceRecord) -> Option<String> {
    record
        .aliases
        .iter()
        .find(|a| a.kind == AliasKind::Path)
        .map(|a| a.value.clone())
}

async fn apply_changes(
    ctx: &SyncContext,
    connection: &ConnectionRow,
    connector: &DriveConnector,
    changes: Vec<model::Change>,
    report: &mut IncrementalReport,
) -> Result<()> {
    let domain = connector.domain().to_owned();
    let depth = connector.settings().depth;
    // Drive may list one file several times; the last entry is the latest.
    let mut latest: BTreeMap<String, model::Change> = BTreeMap::new();
    for c in changes {
        if c.change_type.as_deref() == Some("drive") {
            report.skipped += 1;
            continue;
        }
        match c
            .file_id
            .clone()
            .or_else(|| c.file.as_ref().map(|f| f.id.clone()))
        {
            Some(id) => {
                latest.insert(id, c);
            }
            None => report.skipped += 1,
        }
    }
    let mut moved: Vec<SpaceAddress> = Vec::new();
    for (id, change) in latest {
        if change.file.as_ref().is_some_and(|f| !f.is_folder()) {
            report.skipped += 1;
            continue;
        }
        let address = cmcp_connectors::drive::mapping::folder_address(&domain, &id)?;
        let suspicious = change.removed
            || change
                .file
                .as_ref()
                .is_some_and(|f| f.trashed == Some(true));
        let known = ctx.store.get_space(&address).await?;
        match connector.read_folder(&id).await? {
            FolderRead::Gone => {
                if ctx.store.tombstone(&address).await? {
                    report.tombstoned += 1;
                } else {
                    report.skipped += 1;
                }
            }
            FolderRead::Found { record, depth: d } if d <= depth => {
                if suspicious {
                    report.kept += 1;
                }
                if known.is_some() && current_path(ctx, &address).await? != path_of(&record) {
                    moved.push(address.clone());
                }
                apply(ctx, connection, &[record], report).await?;
            }
            FolderRead::Found { .. } | FolderRead::NotInADrive => {
                if suspicious && known.is_some() {
                    report.kept += 1;
                } else {
                    report.skipped += 1;
                }
            }
        }
    }
    if !moved.is_empty() {
        refresh_descendants(ctx, connection, connector, &moved, depth, report).await?;
    }
    Ok(())
}

/// Re-reads the active folders below renamed or moved ones: their paths
/// changed although the feed did not mention them.
async fn refresh_descendants(
    ctx: &SyncContext,
    connection: &ConnectionRow,
    connector: &DriveConnector,
    roots: &[SpaceAddress],
    depth: u32,
    report: &mut IncrementalReport,
) -> Result<()> {
    let spaces = ctx
        .store
        .list_spaces(&SpaceFilter {
            connection_id: Some(connection.id.clone()),
            status: Some(SpaceStatus::Active),
            ..SpaceFilter::default()
        })
        .await?;
    let mut children: HashMap<SpaceAddress, Vec<SpaceAddress>> = HashMap::new();
    for s in spaces {
        if let Some(c) = s.container {
            children.entry(c).or_default().push(s.address);
        }
    }
    let mut queue: Vec<SpaceAddress> = roots.to_vec();
    let mut done: HashSet<SpaceAddress> = roots.iter().cloned().collect();
    while let Some(parent) = queue.pop() {
        for child in children.get(&parent).cloned().unwrap_or_default() {
            if !done.insert(child.clone()) {
                continue;
            }
            match connector.read_folder(child.stable_id()).await? {
                FolderRead::Found { record, depth: d } if d <= depth => {
                    apply(ctx, connection, &[record], report).await?;
                }
                FolderRead::Gone => {
                    if ctx.store.tombstone(&child).await? {
                        report.tombstoned += 1;
                    }
                }
                _ => report.skipped += 1,
            }
            queue.push(child);
        }
    }
    Ok(())
}
