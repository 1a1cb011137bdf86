//! Incremental sync from a connector's change feed: apply what changed
//! since the stored positions instead of re-listing, through the same
//! `Store::apply_page` path as a full sync. Any connector that offers
//! [`Connector::change_feed`] is served (Drive's `changes.list` today).
//!
//! Positions: [`run_full`] reads every feed's start position *before* the
//! full listing and records them only when the listing was complete, so
//! nothing that changed during the listing is skipped (replaying a change is
//! harmless: upserts are keyed on stable ids). [`run_incremental`] then reads
//! each feed from its position and stores the next one only after the
//! changes are applied.
//!
//! The connector re-reads every changed space by id rather than trusting the
//! feed ([`FeedEntry`]). A `removed` or trashed entry may only mean lost
//! access, so a space is tombstoned only when the direct read says it is
//! gone; one still readable is kept. A rename or move changes the paths of
//! everything below, which the feed does not report: those descendants are
//! re-read too.
//!
//! Limits, left to the next full sync: feeds created since the last full
//! listing (a new shared drive) have no position yet; a space moved out of
//! what the catalogue lists stays as it was.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use cmcp_connectors::Connector;
use cmcp_connectors::feed::{ChangeFeed, FeedEntry, FeedPosition};
use cmcp_domain::{
    AliasKind, RunFigures, RunOutcome, RunTrigger, SpaceAddress, SpaceRecord, SpaceStatus,
};
use cmcp_registry::{ConnectionRow, SpaceFilter, TombstoneOutcome};
use tracing::{info, instrument, warn};

use crate::error::{Result, WorkerError};
use crate::lease::ConnectionLease;
use crate::sync::{SyncContext, SyncOutcome, run_sync_as};

/// What one incremental pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IncrementalReport {
    pub run_id: String,
    /// Feeds read (Drive: one per shared drive).
    pub feeds: u64,
    /// Feed entries read (before collapsing repeats of one file).
    pub changes: u64,
    pub created: u64,
    pub updated: u64,
    pub renamed: u64,
    pub unchanged: u64,
    /// Confirmed gone by a direct read.
    pub tombstoned: u64,
    /// `removed`/trashed entries whose space still reads: kept.
    pub kept: u64,
    /// Entries about nothing the catalogue lists.
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

/// The connection's connector, built like every other (shared budget and
/// page cache included).
async fn connector(ctx: &SyncContext, connection: &ConnectionRow) -> Result<Box<dyn Connector>> {
    Ok(crate::budget::connector(&ctx.store, &ctx.cipher, &ctx.http, connection).await??)
}

fn no_feed(connection: &ConnectionRow) -> WorkerError {
    WorkerError::Sync {
        connection_id: connection.id.clone(),
        detail: format!("a {} connection has no change feed", connection.platform),
    }
}

/// A full sync that also records where each change feed starts, when the
/// connector has one (see the module docs for the order); a plain full
/// sync otherwise.
#[instrument(skip_all, fields(connection_id = %connection_id))]
pub async fn run_full(
    ctx: &SyncContext,
    connection_id: &str,
    trigger: RunTrigger,
) -> Result<SyncOutcome> {
    run_full_as(ctx, connection_id, trigger, None).await
}

/// [`run_full`], the run getting the id `run_id` when given.
pub async fn run_full_as(
    ctx: &SyncContext,
    connection_id: &str,
    trigger: RunTrigger,
    run_id: Option<&str>,
) -> Result<SyncOutcome> {
    let connection = ctx.store.get_connection(connection_id).await?;
    // A connector that cannot be built fails its run in `run_sync`, which
    // records why.
    let positions = match connector(ctx, &connection).await {
        Ok(c) => match c.change_feed() {
            Some(feed) => match feed.start_positions().await {
                Ok(p) => Some(p),
                Err(e) => {
                    warn!(error = %e, "could not read start positions before the listing");
                    Some(Vec::new())
                }
            },
            None => None,
        },
        Err(_) => None,
    };
    let result = run_sync_as(ctx, connection_id, trigger, run_id).await?;
    if let (Some(positions), SyncOutcome::Complete { .. }) = (positions, &result) {
        let tokens: Vec<(String, String)> =
            positions.into_iter().map(|p| (p.feed, p.token)).collect();
        ctx.store
            .set_drive_page_tokens(connection_id, &tokens)
            .await?;
    }
    Ok(result)
}

/// Applies every feed's changes since its stored position; runs a full
/// sync first when there is none. What a delivery planned as
/// `Plan::ChangeFeed` (a Drive `change` notification) runs.
#[instrument(skip_all, fields(connection_id = %connection_id))]
pub async fn run_incremental(ctx: &SyncContext, connection_id: &str) -> Result<IncrementalOutcome> {
    let positions = ctx.store.drive_page_tokens(connection_id).await?;
    if positions.is_empty() {
        let trigger = changes_trigger(&ctx.store.get_connection(connection_id).await?);
        return Ok(IncrementalOutcome::FullSync(
            run_full(ctx, connection_id, trigger).await?,
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
        .start_run(connection_id, changes_trigger(&connection), &ctx.holder)
        .await?;
    let mut report = IncrementalReport {
        run_id: run_id.clone(),
        ..IncrementalReport::default()
    };
    let mut figures = RunFigures::default();
    let outcome = async {
        let connector = connector(ctx, &connection).await?;
        let feed = connector
            .change_feed()
            .ok_or_else(|| no_feed(&connection))?;
        for p in &positions {
            let position = FeedPosition {
                feed: p.drive_id.clone(),
                token: p.page_token.clone(),
            };
            let batch = feed.changes_since(&position).await?;
            figures.pages += batch.figures.pages;
            figures.requests += batch.figures.requests;
            figures.retries += batch.figures.retries;
            report.feeds += 1;
            report.changes += batch.read;
            report.skipped += batch.skipped;
            apply_entries(
                ctx,
                &connection,
                &*connector,
                feed,
                batch.entries,
                &mut report,
            )
            .await?;
            // Another holder may be reading the same feed: moving the
            // position now could skip what it has not applied yet.
            if lease.is_lost() {
                return Err(WorkerError::Sync {
                    connection_id: connection_id.to_owned(),
                    detail: "sync lease lost mid-pass; feed positions left as they were".to_owned(),
                });
            }
            ctx.store
                .set_drive_page_token(connection_id, &p.drive_id, &batch.next)
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
    info!(?report, "feed changes applied");
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

async fn apply_entries(
    ctx: &SyncContext,
    connection: &ConnectionRow,
    connector: &dyn Connector,
    feed: &dyn ChangeFeed,
    entries: Vec<FeedEntry>,
    report: &mut IncrementalReport,
) -> Result<()> {
    let mut moved: Vec<SpaceAddress> = Vec::new();
    for entry in entries {
        match entry {
            FeedEntry::Gone(address) => {
                if crate::gone::confirm_gone(&ctx.store, connector, &connection.id, &address)
                    .await?
                    == TombstoneOutcome::Tombstoned
                {
                    report.tombstoned += 1;
                } else {
                    report.skipped += 1;
                }
            }
            FeedEntry::Current { record, suspicious } => {
                if suspicious {
                    report.kept += 1;
                }
                let address = record.address.clone();
                let known = ctx.store.get_space(&address).await?;
                if known.is_some() && current_path(ctx, &address).await? != path_of(&record) {
                    moved.push(address);
                }
                apply(ctx, connection, &[record], report).await?;
            }
            FeedEntry::OutOfScope {
                address,
                suspicious,
            } => {
                if suspicious && ctx.store.get_space(&address).await?.is_some() {
                    report.kept += 1;
                } else {
                    report.skipped += 1;
                }
            }
        }
    }
    if !moved.is_empty() {
        refresh_descendants(ctx, connection, connector, feed, &moved, report).await?;
    }
    Ok(())
}

/// Re-reads the active spaces below renamed or moved ones: their paths
/// changed although the feed did not mention them.
async fn refresh_descendants(
    ctx: &SyncContext,
    connection: &ConnectionRow,
    connector: &dyn Connector,
    feed: &dyn ChangeFeed,
    roots: &[SpaceAddress],
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
            match feed.reread(&child).await? {
                FeedEntry::Current { record, .. } => {
                    apply(ctx, connection, &[record], report).await?;
                }
                FeedEntry::Gone(_) => {
                    if crate::gone::confirm_gone(&ctx.store, connector, &connection.id, &child)
                        .await?
                        == TombstoneOutcome::Tombstoned
                    {
                        report.tombstoned += 1;
                    }
                }
                FeedEntry::OutOfScope { .. } => report.skipped += 1,
            }
            queue.push(child);
        }
    }
    Ok(())
}

/// The trigger of an incremental run. Drive's is the only change feed, so
/// its `drive-changes` is the only such trigger.
fn changes_trigger(_connection: &ConnectionRow) -> RunTrigger {
    RunTrigger::DriveChanges
}
