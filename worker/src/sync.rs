//! The sync engine: one full read of a connection's catalogue into the
//! registry. It is independent of the queue so tests, the CLI and the job
//! all run the same code.
//!
//! A run holds the connection's lease for its whole length (renewed in the
//! background), so two workers of a fleet never sync one connection at
//! once; a killed worker's lease lapses and the job's next pick-up proceeds.
//! Pages are applied as they arrive. Only a listing in which every page
//! succeeded marks unseen spaces missing; a partial one changes nothing about
//! spaces it did not see.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cmcp_connectors::{ConnectorError, HttpConfig, ListingReport};
use cmcp_domain::{RunFigures, RunOutcome, SpaceAddress, SpaceRecord};
use cmcp_registry::{Cipher, LeaseAttempt, Store};
use serde::Deserialize;
use tokio::sync::mpsc;
use tracing::{info, instrument, warn};

use crate::error::{Result, WorkerError};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SyncConfig {
    /// How long a sync lease lasts without renewal. A killed worker's
    /// connection is free again after this.
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub lease_ttl: Duration,
    /// Pages read ahead of the registry writes.
    pub page_buffer: usize,
}

impl Default for SyncConfig {
    fn default() -> Self {
        SyncConfig {
            lease_ttl: Duration::from_secs(60),
            page_buffer: 4,
        }
    }
}

/// What a sync needs: the store, the master key, and how to talk HTTP.
#[derive(Clone)]
pub struct SyncContext {
    pub store: Store,
    pub cipher: Cipher,
    pub http: HttpConfig,
    pub sync: SyncConfig,
    /// Fleet-unique name of this worker, used as the lease holder.
    pub holder: String,
}

/// How a sync ended.
#[derive(Debug, Clone)]
pub enum SyncResult {
    Finished {
        run_id: String,
        outcome: RunOutcome,
        figures: RunFigures,
        error: Option<String>,
        /// The failure may pass with time (a 5xx, a dropped connection); a
        /// retry later is worthwhile.
        retryable: bool,
        /// The platform asked us to wait until then before trying again.
        retry_at: Option<chrono::DateTime<chrono::Utc>>,
    },
    /// Another worker holds the connection until `until_ms`; nothing ran.
    Deferred { holder: String, until_ms: i64 },
}

#[instrument(skip_all, fields(connection_id = %connection_id, trigger = %trigger))]
pub async fn run_sync(ctx: &SyncContext, connection_id: &str, trigger: &str) -> Result<SyncResult> {
    let connection = ctx.store.get_connection(connection_id).await?;
    let ttl_ms = i64::try_from(ctx.sync.lease_ttl.as_millis()).unwrap_or(i64::MAX);
    if let LeaseAttempt::HeldBy { holder, until_ms } = ctx
        .store
        .try_acquire_lease(connection_id, &ctx.holder, ttl_ms)
        .await?
    {
        info!(%holder, until_ms, "connection is being synced elsewhere; deferring");
        return Ok(SyncResult::Deferred { holder, until_ms });
    }
    // Holding the lease, no other run of this connection is alive: any run
    // still marked running belonged to a worker that died.
    let abandoned = ctx.store.abandon_running_runs(connection_id).await?;
    if abandoned > 0 {
        warn!(abandoned, "closed runs left behind by a stopped worker");
    }
    let lost = Arc::new(AtomicBool::new(false));
    let renewer = spawn_lease_renewer(ctx.clone(), connection_id.to_owned(), lost.clone());
    let result = sync_under_lease(ctx, &connection, trigger, &lost).await;
    renewer.abort();
    if let Err(e) = ctx.store.release_lease(connection_id, &ctx.holder).await {
        warn!(error = %e, "could not release the sync lease; it will lapse");
    }
    result
}

fn spawn_lease_renewer(
    ctx: SyncContext,
    connection_id: String,
    lost: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let ttl_ms = i64::try_from(ctx.sync.lease_ttl.as_millis()).unwrap_or(i64::MAX);
        let every = (ctx.sync.lease_ttl / 3).max(Duration::from_millis(50));
        loop {
            tokio::time::sleep(every).await;
            match ctx
                .store
                .renew_lease(&connection_id, &ctx.holder, ttl_ms)
                .await
            {
                Ok(true) => {}
                Ok(false) => {
                    warn!(connection_id, "sync lease lost to another worker");
                    lost.store(true, Ordering::SeqCst);
                    return;
                }
                Err(e) => warn!(connection_id, error = %e, "could not renew the sync lease"),
            }
        }
    })
}

async fn sync_under_lease(
    ctx: &SyncContext,
    connection: &cmcp_registry::ConnectionRow,
    trigger: &str,
    lost: &AtomicBool,
) -> Result<SyncResult> {
    let started = Instant::now();
    let run_id = ctx
        .store
        .start_run(&connection.id, trigger, &ctx.holder)
        .await?;
    let mut figures = RunFigures::default();

    let token = ctx
        .store
        .connection_token(&ctx.cipher, &connection.id)
        .await?;
    let spec = connection.spec();
    let deps = crate::budget::connector_deps(
        &ctx.store,
        &connection.id,
        spec.platform,
        &spec.base_url,
        &token,
    )
    .await;
    let connector =
        match cmcp_connectors::build_with(&spec, &connection.settings, token, &ctx.http, deps) {
            Ok(c) => c,
            Err(e) => {
                return finish(
                    ctx,
                    &run_id,
                    RunOutcome::Failed,
                    figures,
                    started,
                    Some(e.to_string()),
                    false,
                    None,
                )
                .await;
            }
        };

    let (tx, mut rx) = mpsc::channel::<Vec<SpaceRecord>>(ctx.sync.page_buffer.max(1));
    let listing = tokio::spawn(async move { connector.list(tx).await });

    let mut seen: HashSet<SpaceAddress> = HashSet::new();
    let mut store_error = None;
    while let Some(page) = rx.recv().await {
        figures.items_seen += page.len() as u64;
        seen.extend(page.iter().map(|r| r.address.clone()));
        match ctx
            .store
            .apply_page(&connection.id, &connection.owner, &page)
            .await
        {
            Ok(stats) => {
                figures.created += stats.created;
                figures.updated += stats.updated;
                figures.renamed += stats.renamed;
                figures.unchanged += stats.unchanged;
                figures.skipped_foreign += stats.skipped_foreign;
            }
            Err(e) => {
                // Stop reading: dropping the receiver ends the listing.
                store_error = Some(e);
                break;
            }
        }
    }
    drop(rx);
    let report = listing.await.map_err(|e| WorkerError::Sync {
        connection_id: connection.id.clone(),
        detail: format!("listing task failed: {e}"),
    })?;
    if let Some(e) = store_error {
        return Err(e.into());
    }

    let report: std::result::Result<ListingReport, ConnectorError> = report;
    match report {
        Ok(report) => {
            add_http(&mut figures, &report);
            if let Err(e) = ctx
                .store
                .set_connection_risks(&connection.id, &report.risks)
                .await
            {
                warn!(error = %e, "could not record the connection's risks");
            }
            let lease_lost = lost.load(Ordering::SeqCst);
            if report.complete && !lease_lost {
                figures.missing = ctx.store.mark_missing(&connection.id, &seen).await?;
                // Mapping proposals follow the catalogue; a failure here is
                // logged and never fails the sync (the next run retries).
                if let Err(e) =
                    cmcp_matching::refresh_proposals(&ctx.store, &Default::default()).await
                {
                    warn!(error = %e, "could not refresh mapping proposals");
                }
                finish(
                    ctx,
                    &run_id,
                    RunOutcome::Complete,
                    figures,
                    started,
                    None,
                    false,
                    None,
                )
                .await
            } else {
                let mut why = report.failures.join("; ");
                if lease_lost {
                    why = format!("sync lease lost mid-run; {why}");
                }
                finish(
                    ctx,
                    &run_id,
                    RunOutcome::Partial,
                    figures,
                    started,
                    Some(why),
                    true,
                    None,
                )
                .await
            }
        }
        Err(e) => {
            let retryable = e.is_retryable();
            let retry_at = match &e {
                ConnectorError::RateLimited { retry_at, .. } => Some(*retry_at),
                _ => None,
            };
            let outcome = if figures.items_seen > 0 {
                RunOutcome::Partial
            } else {
                RunOutcome::Failed
            };
            finish(
                ctx,
                &run_id,
                outcome,
                figures,
                started,
                Some(e.to_string()),
                retryable || retry_at.is_some(),
                retry_at,
            )
            .await
        }
    }
}

fn add_http(figures: &mut RunFigures, report: &ListingReport) {
    figures.pages = report.figures.pages;
    figures.requests = report.figures.requests;
    figures.not_modified = report.figures.not_modified;
    figures.retries = report.figures.retries;
    figures.rate_limit_waits = report.figures.rate_limit_waits;
}

#[allow(clippy::too_many_arguments)]
async fn finish(
    ctx: &SyncContext,
    run_id: &str,
    outcome: RunOutcome,
    mut figures: RunFigures,
    started: Instant,
    error: Option<String>,
    retryable: bool,
    retry_at: Option<chrono::DateTime<chrono::Utc>>,
) -> Result<SyncResult> {
    figures.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    ctx.store
        .finish_run(run_id, outcome, &figures, error.as_deref())
        .await?;
    info!(
        run_id,
        outcome = outcome.as_str(),
        pages = figures.pages,
        requests = figures.requests,
        seen = figures.items_seen,
        created = figures.created,
        updated = figures.updated,
        renamed = figures.renamed,
        missing = figures.missing,
        duration_ms = figures.duration_ms,
        "sync run finished"
    );
    Ok(SyncResult::Finished {
        run_id: run_id.to_owned(),
        outcome,
        figures,
        error,
        retryable,
        retry_at,
    })
}
