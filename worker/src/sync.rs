//! The sync engine: one full read of a connection's catalogue into the
//! registry. It is independent of the queue so tests, the CLI and the job
//! all run the same code.
//!
//! A run holds the connection's lease for its whole length (a
//! [`ConnectionLease`], renewed in the background), so no two jobs — of one
//! worker or of a fleet — sync one connection at once; a killed worker's
//! lease lapses and the job's next pick-up proceeds.
//! Pages are applied as they arrive, while later ones are fetched. Only a
//! listing in which every page succeeded marks unseen spaces missing; a
//! partial one changes nothing about spaces it did not see. What a listing
//! did not see is found in the store (each applied page stamps its
//! sightings with the run), so a run holds no set of the addresses it
//! listed and its memory does not grow with the catalogue.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cmcp_connectors::{Connector, ConnectorError, HttpConfig, ListingReport, RetryIntent};
use cmcp_domain::{
    ConnectionStatus, RiskCode, RiskNotice, RunFigures, RunOutcome, RunTrigger, SpaceAddress,
    SpaceRecord,
};
use cmcp_registry::{
    Backend, Cipher, ConnectionRow, DriftKind, HoldRow, PageStats, SpaceChange, Store,
};
use serde::Deserialize;
use tokio::sync::mpsc;
use tracing::{info, instrument, warn};

use crate::breaker;
use crate::error::{Result, WorkerError};
use crate::lease::ConnectionLease;
use crate::progress::{PROGRESS_EVERY, Progress, with_http};

#[derive(Debug, Clone, serde::Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SyncConfig {
    /// How long a sync lease lasts without renewal. A killed worker's
    /// connection is free again after this.
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub lease_ttl: Duration,
    /// Pages read ahead of the registry writes.
    pub page_buffer: usize,
    /// Pages applied at once on PostgreSQL, each in its own transaction
    /// (SQLite has one writer: always 1), while at most half of the pool
    /// is in use (else 1, leaving connections to the rest of a busy
    /// process). A page never overlaps an
    /// earlier one still being applied that shares a space with it, so a
    /// space's readings are applied in the order they were listed.
    pub apply_in_flight: usize,
    /// The breaker: a complete listing that would mark more than this
    /// share of the connection's seen spaces missing marks nothing and
    /// holds the connection (see [`crate::breaker`]).
    pub max_missing_fraction: f64,
    /// … or more than this many.
    pub max_missing: u64,
    /// A space is tombstoned after this many consecutive complete listings
    /// without it (0: never by absence, only by a direct read).
    pub tombstone_after: u32,
    /// First wait before a delivery whose processing failed is tried again;
    /// it doubles per attempt (with jitter) up to `delivery_retry_max`.
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub delivery_retry_min: Duration,
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub delivery_retry_max: Duration,
    /// A delivery still failing this long after it arrived is `failed`,
    /// with its last error, for an ADMIN to replay.
    #[serde(with = "cmcp_connectors::common::config::duration_text")]
    pub delivery_retry_horizon: Duration,
    /// New private spaces one person's syncs may create per UTC day
    /// ([`crate::private_cap`]).
    pub private_spaces_per_day: u64,
}

impl Default for SyncConfig {
    fn default() -> Self {
        SyncConfig {
            lease_ttl: Duration::from_secs(60),
            page_buffer: 4,
            apply_in_flight: 2,
            max_missing_fraction: 0.10,
            max_missing: 50,
            tombstone_after: 7,
            delivery_retry_min: Duration::from_secs(2),
            delivery_retry_max: Duration::from_secs(15 * 60),
            delivery_retry_horizon: Duration::from_secs(24 * 3600),
            private_spaces_per_day: 200,
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

/// How a sync ended. A run that did not complete says what trying again
/// would do, as its failure decided it ([`ConnectorError::intent`]).
#[derive(Debug, Clone)]
pub enum SyncOutcome {
    /// Every page was read and applied; unseen spaces are marked missing.
    Complete { run_id: String, figures: RunFigures },
    /// Some records were applied but the listing did not finish: nothing
    /// was marked missing.
    Partial {
        run_id: String,
        figures: RunFigures,
        why: String,
        intent: RetryIntent,
    },
    /// Nothing was read.
    Failed {
        run_id: String,
        figures: RunFigures,
        why: String,
        intent: RetryIntent,
    },
    /// Another worker holds the connection until `until_ms`; nothing ran.
    Deferred { holder: String, until_ms: i64 },
}

impl SyncOutcome {
    /// The outcome recorded on the run; `None` when nothing ran.
    pub fn run_outcome(&self) -> Option<RunOutcome> {
        match self {
            SyncOutcome::Complete { .. } => Some(RunOutcome::Complete),
            SyncOutcome::Partial { .. } => Some(RunOutcome::Partial),
            SyncOutcome::Failed { .. } => Some(RunOutcome::Failed),
            SyncOutcome::Deferred { .. } => None,
        }
    }

    pub fn run_id(&self) -> Option<&str> {
        match self {
            SyncOutcome::Complete { run_id, .. }
            | SyncOutcome::Partial { run_id, .. }
            | SyncOutcome::Failed { run_id, .. } => Some(run_id),
            SyncOutcome::Deferred { .. } => None,
        }
    }

    pub fn figures(&self) -> Option<&RunFigures> {
        match self {
            SyncOutcome::Complete { figures, .. }
            | SyncOutcome::Partial { figures, .. }
            | SyncOutcome::Failed { figures, .. } => Some(figures),
            SyncOutcome::Deferred { .. } => None,
        }
    }

    /// Why the run did not complete, as recorded on it.
    pub fn error(&self) -> Option<&str> {
        match self {
            SyncOutcome::Partial { why, .. } | SyncOutcome::Failed { why, .. } => Some(why),
            SyncOutcome::Complete { .. } | SyncOutcome::Deferred { .. } => None,
        }
    }
}

/// A run in progress: its row, its clock and what it counted so far.
struct Run {
    id: String,
    started: Instant,
    figures: RunFigures,
}

/// How a run ended, before it is recorded.
enum Ending {
    Complete,
    Partial { why: String, intent: RetryIntent },
    Failed { why: String, intent: RetryIntent },
}

impl Ending {
    /// A connector error ends the run; records already applied make it
    /// partial.
    fn from_error(e: &ConnectorError, applied_any: bool) -> Ending {
        let (why, intent) = (e.to_string(), e.intent());
        if applied_any {
            Ending::Partial { why, intent }
        } else {
            Ending::Failed { why, intent }
        }
    }

    fn outcome(&self) -> RunOutcome {
        match self {
            Ending::Complete => RunOutcome::Complete,
            Ending::Partial { .. } => RunOutcome::Partial,
            Ending::Failed { .. } => RunOutcome::Failed,
        }
    }

    fn why(&self) -> Option<&str> {
        match self {
            Ending::Complete => None,
            Ending::Partial { why, .. } | Ending::Failed { why, .. } => Some(why),
        }
    }
}

#[instrument(skip_all, fields(connection_id = %connection_id, trigger = %trigger))]
pub async fn run_sync(
    ctx: &SyncContext,
    connection_id: &str,
    trigger: RunTrigger,
) -> Result<SyncOutcome> {
    run_sync_as(ctx, connection_id, trigger, None).await
}

/// [`run_sync`], the run getting the id `run_id` when given (see
/// [`crate::SyncConnection::run_id`]).
pub async fn run_sync_as(
    ctx: &SyncContext,
    connection_id: &str,
    trigger: RunTrigger,
    run_id: Option<&str>,
) -> Result<SyncOutcome> {
    let connection = ctx.store.get_connection(connection_id).await?;
    let lease =
        match ConnectionLease::acquire(&ctx.store, connection_id, &ctx.holder, ctx.sync.lease_ttl)
            .await?
        {
            Ok(lease) => lease,
            Err(held) => {
                crate::lease::log_deferral(&held);
                return Ok(SyncOutcome::Deferred {
                    holder: held.holder,
                    until_ms: held.until_ms,
                });
            }
        };
    // Holding the lease, no other run of this connection is alive: any run
    // still marked running belonged to a holder whose lease lapsed.
    let abandoned = ctx
        .store
        .abandon_running_runs(connection_id, &ctx.holder)
        .await?;
    if abandoned > 0 {
        warn!(abandoned, "closed runs left behind by a stopped worker");
    }
    let result = sync_under_lease(ctx, &connection, trigger, run_id, lease.lost_flag()).await;
    lease.release().await;
    result
}

async fn sync_under_lease(
    ctx: &SyncContext,
    connection: &ConnectionRow,
    trigger: RunTrigger,
    run_id: Option<&str>,
    lost: &AtomicBool,
) -> Result<SyncOutcome> {
    let run = Run {
        id: ctx
            .store
            .start_run_as(run_id, &connection.id, trigger, &ctx.holder)
            .await?,
        started: Instant::now(),
        figures: RunFigures::default(),
    };
    let id = run.id.clone();
    let result = run_under_lease(ctx, connection, trigger, run, lost).await;
    if let Err(e) = &result {
        // The run ends with what stopped it (the store, a write): left
        // running, the next holder would close it as abandoned by a
        // stopped worker, which is not what happened.
        if let Err(fe) = ctx.store.fail_open_run(&id, &e.to_string()).await {
            warn!(run_id = %id, error = %fe, "could not record the run's failure; it will be closed as abandoned");
        }
    }
    result
}

/// The work of one run, from its start to its recorded end.
async fn run_under_lease(
    ctx: &SyncContext,
    connection: &ConnectionRow,
    trigger: RunTrigger,
    mut run: Run,
    lost: &AtomicBool,
) -> Result<SyncOutcome> {
    let progress = Progress::start(&ctx.store, &run.id, PROGRESS_EVERY);
    let connector = match connect(ctx, connection).await? {
        Ok(c) => c,
        Err(e) => return end(ctx, connection, run, Ending::from_error(&e, false)).await,
    };
    // A reconcile notes every change it applies: what no webhook delivered.
    let mut drift = (trigger == RunTrigger::Reconcile).then(Vec::new);
    let (listed, connector) = list_and_apply(
        ctx,
        connection,
        &run.id,
        connector,
        &mut run.figures,
        drift.as_mut(),
        &progress,
    )
    .await?;
    if trigger == RunTrigger::Reconcile && listed.as_ref().is_ok_and(|r| r.complete) {
        crate::trashed::recheck_unseen(
            ctx,
            connection,
            &run.id,
            connector.as_ref(),
            &mut run.figures,
            drift.as_mut(),
        )
        .await?;
    }
    let ending = match listed {
        Ok(report) => {
            let listing = Listing {
                report: &report,
                run_id: &run.id,
            };
            conclude(
                ctx,
                connection,
                listing,
                lost,
                &mut run.figures,
                drift.as_mut(),
            )
            .await?
        }
        Err(e) => {
            // The listing's counters still say what the run sent.
            run.figures = with_http(std::mem::take(&mut run.figures), &progress.http());
            Ending::from_error(&e, run.figures.items_seen > 0)
        }
    };
    progress.stop().await;
    if let Some(changes) = &drift {
        crate::drift::record(&ctx.store, &connection.id, &run.id, changes).await?;
    }
    end(ctx, connection, run, ending).await
}

/// Records the run's end, and a permanent refusal on the connection.
async fn end(
    ctx: &SyncContext,
    connection: &ConnectionRow,
    run: Run,
    ending: Ending,
) -> Result<SyncOutcome> {
    if let Ending::Failed {
        why,
        intent: RetryIntent::Permanent,
    } = &ending
    {
        credential_rejected(ctx, connection, why).await;
    }
    finish(ctx, run, ending).await
}

/// A permanent refusal (a revoked or expired token, a lost permission) is
/// shown on the connection at once — the nightly reconcile is what finds it
/// when nothing else runs — beside the risks already known. The next
/// complete listing replaces the notices with what it found.
async fn credential_rejected(ctx: &SyncContext, connection: &ConnectionRow, why: &str) {
    let mut risks: Vec<RiskNotice> = connection
        .risks
        .iter()
        .filter(|r| r.code != RiskCode::CredentialRejected)
        .cloned()
        .collect();
    risks.push(RiskNotice {
        code: RiskCode::CredentialRejected,
        message: format!("the platform refused the credential: {why}; replace the token"),
    });
    if let Err(e) = ctx.store.set_connection_risks(&connection.id, &risks).await {
        warn!(error = %e, "could not record the connection's risks");
    }
    // Its status says so too, so a fleet view and the gateway's operators
    // see it without reading notices; an ADMIN's disabled or a hold stays.
    if connection.status == ConnectionStatus::Enabled {
        let actor = format!("worker:{}", ctx.holder);
        if let Err(e) = ctx
            .store
            .set_connection_status(
                &connection.id,
                ConnectionStatus::Rejected,
                &actor,
                Some(why),
            )
            .await
        {
            warn!(error = %e, "could not mark the connection rejected");
        }
    }
}

/// A connection whose credential the platform had refused is enabled again
/// by the first complete listing after (the token was replaced, or access
/// restored). Audited like the refusal.
async fn credential_accepted(ctx: &SyncContext, connection: &ConnectionRow) {
    if connection.status != ConnectionStatus::Rejected {
        return;
    }
    let actor = format!("worker:{}", ctx.holder);
    let reason = "a complete listing read with the credential again";
    match ctx
        .store
        .set_connection_status(
            &connection.id,
            ConnectionStatus::Enabled,
            &actor,
            Some(reason),
        )
        .await
    {
        Ok(_) => info!("the credential reads again; connection enabled"),
        Err(e) => warn!(error = %e, "could not enable the connection again"),
    }
}

/// A listing that returned, in the run that read it (its sightings are
/// stamped with the run).
struct Listing<'a> {
    report: &'a ListingReport,
    run_id: &'a str,
}

/// The connection's connector, with the shared budget and page cache. The
/// outer error is the registry's; the inner one ends the run.
async fn connect(
    ctx: &SyncContext,
    connection: &ConnectionRow,
) -> Result<std::result::Result<Box<dyn Connector>, ConnectorError>> {
    Ok(crate::budget::connector(&ctx.store, &ctx.cipher, &ctx.http, connection).await?)
}

/// Runs the listing and applies its pages as they arrive, stamping their
/// sightings with the run `run_id`. Returns the listing's own result and
/// the connector; a registry failure stops the listing and is the error.
///
/// Why a channel between them: the listing (a task of its own) keeps its
/// requests in flight while this loop writes, so the slower of the two
/// sets the pace, never their sum; the channel's bound (`page_buffer`)
/// keeps the pages waiting, and so the memory, fixed.
async fn list_and_apply(
    ctx: &SyncContext,
    connection: &ConnectionRow,
    run_id: &str,
    connector: Box<dyn Connector>,
    figures: &mut RunFigures,
    mut drift: Option<&mut Vec<SpaceChange>>,
    progress: &Progress,
) -> Result<(
    std::result::Result<ListingReport, ConnectorError>,
    Box<dyn Connector>,
)> {
    let (tx, mut rx) = mpsc::channel::<Vec<SpaceRecord>>(ctx.sync.page_buffer.max(1));
    // The connector comes back from the listing: a reconcile reads the
    // spaces the listing lacked with it.
    let counters = progress.counters();
    let listing = tokio::spawn(async move {
        let listed = connector.list_counted(tx, &counters).await;
        (listed, connector)
    });

    let mut store_error = None;
    let mut cap = crate::private_cap::PrivateCap::start(
        &ctx.store,
        connection,
        ctx.sync.private_spaces_per_day,
    )
    .await?;
    let lanes = match ctx.store.backend() {
        Backend::Sqlite => 1,
        Backend::Postgres => ctx.sync.apply_in_flight.max(1),
    };
    let mut applying: Lanes<Applying> = Lanes::new(lanes);
    // Records whose space the run had already listed: found by the store
    // (the sighting stamped with the run), so the listing holds no set of
    // every address it served.
    let mut repeated = 0u64;
    let mut settle = |done: Result<(PageStats, Vec<SpaceChange>)>,
                      figures: &mut RunFigures,
                      store_error: &mut Option<WorkerError>| match done {
        Ok((stats, changes)) => {
            if let Some(d) = drift.as_deref_mut() {
                d.extend(changes);
            }
            figures.created += stats.created;
            figures.updated += stats.updated;
            figures.renamed += stats.renamed;
            figures.unchanged += stats.unchanged;
            figures.skipped_foreign += stats.skipped_foreign;
            repeated += stats.repeated;
            progress.note(figures);
        }
        Err(e) => {
            store_error.get_or_insert(e);
        }
    };
    while let Some(page) = rx.recv().await {
        figures.items_seen += page.len() as u64;
        let spaces: HashSet<SpaceAddress> = page.iter().map(|r| r.address.clone()).collect();
        // Wait for a free lane, and for every earlier page that shares a
        // space with this one, oldest first (the cap below then sees those
        // spaces as they are, as it did when pages went one at a time).
        // A page takes a lane of its own only while the pool is mostly
        // free: in a busy process (other syncs, deliveries) the pages go
        // one at a time and leave the connections to the rest.
        applying.limit = if ctx.store.mostly_free() { lanes } else { 1 };
        while let Some(a) = applying.before(&spaces) {
            settle(a.finish(connection).await, figures, &mut store_error);
        }
        if store_error.is_some() {
            // Stop reading: dropping the receiver ends the listing.
            break;
        }
        let page = match cap.as_mut() {
            Some(cap) => match cap.admit(&ctx.store, page).await {
                Ok(p) => p,
                Err(e) => {
                    store_error = Some(e);
                    break;
                }
            },
            None => page,
        };
        let (store, id, owner, run) = (
            ctx.store.clone(),
            connection.id.clone(),
            connection.owner.clone(),
            run_id.to_owned(),
        );
        let task = tokio::spawn(async move {
            store
                .apply_listed_page(&id, &owner, &run, &page)
                .await
                .map_err(WorkerError::from)
        });
        applying.start(spaces, Applying(task));
    }
    // Every page started is finished (or failed) before the run goes on.
    while let Some(a) = applying.oldest() {
        settle(a.finish(connection).await, figures, &mut store_error);
    }
    drop(rx);
    let (listed, connector) = listing.await.map_err(|e| WorkerError::Sync {
        connection_id: connection.id.clone(),
        detail: format!("listing task failed: {e}"),
    })?;
    if let Some(e) = store_error {
        return Err(e);
    }
    // Held-back spaces are shown to the person with the token's risks.
    let listed = listed.map(|mut report| {
        if repeated > 0 {
            report.complete = false;
            report.failures.push(format!(
                "{repeated} spaces were listed twice in this run; the listing shifted under \
                 us, so another item may have been skipped"
            ));
        }
        if let Some(notice) = cap.as_ref().and_then(|c| c.notice()) {
            info!(
                held = cap.as_ref().map_or(0, |c| c.held()),
                "daily private-space cap reached"
            );
            report.risks.push(notice);
        }
        report
    });
    Ok((listed, connector))
}

/// A page being applied in a task of its own.
struct Applying(tokio::task::JoinHandle<Result<(PageStats, Vec<SpaceChange>)>>);

impl Applying {
    async fn finish(self, connection: &ConnectionRow) -> Result<(PageStats, Vec<SpaceChange>)> {
        self.0.await.map_err(|e| WorkerError::Sync {
            connection_id: connection.id.clone(),
            detail: format!("page apply task failed: {e}"),
        })?
    }
}

/// The pages being applied, oldest first, each with the spaces it holds.
struct Lanes<T> {
    limit: usize,
    pages: VecDeque<(HashSet<SpaceAddress>, T)>,
}

impl<T> Lanes<T> {
    fn new(limit: usize) -> Self {
        Lanes {
            limit: limit.max(1),
            pages: VecDeque::with_capacity(limit.max(1)),
        }
    }

    /// The oldest page to finish before a page holding `spaces` may
    /// start: while every lane is taken, or while an earlier page still
    /// being applied shares a space with it (its reading must land
    /// first: the last reading of a space wins). `None`: start it now.
    fn before(&mut self, spaces: &HashSet<SpaceAddress>) -> Option<T> {
        let wait = self.pages.len() >= self.limit
            || self.pages.iter().any(|(held, _)| !held.is_disjoint(spaces));
        if wait {
            self.pages.pop_front().map(|(_, page)| page)
        } else {
            None
        }
    }

    fn start(&mut self, spaces: HashSet<SpaceAddress>, page: T) {
        self.pages.push_back((spaces, page));
    }

    fn oldest(&mut self) -> Option<T> {
        self.pages.pop_front().map(|(_, page)| page)
    }
}

/// What a listing that returned means for the registry: only a complete
/// one, with the lease held throughout and within the breaker's bounds,
/// marks unseen spaces missing.
async fn conclude(
    ctx: &SyncContext,
    connection: &ConnectionRow,
    listing: Listing<'_>,
    lost: &AtomicBool,
    figures: &mut RunFigures,
    drift: Option<&mut Vec<SpaceChange>>,
) -> Result<Ending> {
    let report = listing.report;
    let reconcile = drift.is_some();
    add_http(figures, report);
    let lease_lost = lost.load(Ordering::SeqCst);
    if !report.complete || lease_lost {
        // A hold stays until a complete listing decides about it.
        let hold = ctx.store.get_hold(&connection.id).await?;
        record_risks(ctx, connection, &report.risks, hold.as_ref()).await;
        let mut why = report.failures.join("; ");
        if lease_lost {
            why = format!("sync lease lost mid-run; {why}");
        }
        // A failed page, or another worker took over: both pass with time.
        return Ok(Ending::Partial {
            why,
            intent: RetryIntent::Transient,
        });
    }
    let preview = ctx
        .store
        .missing_preview_of_run(&connection.id, listing.run_id)
        .await?;
    credential_accepted(ctx, connection).await;
    if let Some(reason) = breaker::trips(&ctx.sync, &preview) {
        warn!(
            would_miss = preview.would_miss.len(),
            seen_before = preview.seen_before,
            "breaker: the listing lacks too many spaces; nothing marked missing, connection held"
        );
        ctx.store
            .hold_connection(&connection.id, listing.run_id, &preview, &reason)
            .await?;
        let hold = ctx.store.get_hold(&connection.id).await?;
        record_risks(ctx, connection, &report.risks, hold.as_ref()).await;
        return Ok(Ending::Complete);
    }
    if ctx.store.clear_hold(&connection.id).await? {
        info!("breaker: a complete listing agrees with the registry; hold cleared");
    }
    record_risks(ctx, connection, &report.risks, None).await;
    if let Some(d) = drift {
        d.extend(
            preview
                .would_miss
                .iter()
                .filter_map(|a| a.parse().ok())
                .map(|address| SpaceChange {
                    address,
                    kind: DriftKind::Missing,
                }),
        );
    }
    figures.missing = ctx
        .store
        .mark_unseen_by_run(&connection.id, listing.run_id)
        .await?;
    let tombstoned = ctx
        .store
        .tombstone_long_missing(&connection.id, ctx.sync.tombstone_after)
        .await?;
    if !tombstoned.is_empty() {
        info!(
            tombstoned = tombstoned.len(),
            after = ctx.sync.tombstone_after,
            "tombstoned spaces absent from consecutive complete listings"
        );
    }
    // Mapping proposals follow the catalogue (what changed; everything on a
    // reconcile); a failure here is logged and never fails the sync (the
    // next run retries from the same position).
    if let Err(e) =
        cmcp_matching::refresh_after_sync(&ctx.store, &Default::default(), reconcile).await
    {
        warn!(error = %e, "could not refresh mapping proposals");
    }
    crate::people::refresh_suggestions_after_sync(&ctx.store, connection).await;
    Ok(Ending::Complete)
}

/// The credential's risks as the listing revealed them, plus the breaker's
/// notice while the connection is held. A failure is logged: risks are
/// advice, never a reason to fail the run.
async fn record_risks(
    ctx: &SyncContext,
    connection: &ConnectionRow,
    risks: &[RiskNotice],
    hold: Option<&HoldRow>,
) {
    let mut risks = risks.to_vec();
    risks.extend(hold.map(|h| breaker::notice(&connection.id, h)));
    if let Err(e) = ctx.store.set_connection_risks(&connection.id, &risks).await {
        warn!(error = %e, "could not record the connection's risks");
    }
}

fn add_http(figures: &mut RunFigures, report: &ListingReport) {
    figures.pages = report.figures.pages;
    figures.requests = report.figures.requests;
    figures.not_modified = report.figures.not_modified;
    figures.retries = report.figures.retries;
    figures.rate_limit_waits = report.figures.rate_limit_waits;
    // Records the connector refused as outside the connection's tenant.
    figures.skipped_foreign += report.skipped_foreign;
}

/// Records the run's end and says how the sync ended.
async fn finish(ctx: &SyncContext, run: Run, ending: Ending) -> Result<SyncOutcome> {
    let Run {
        id: run_id,
        started,
        mut figures,
    } = run;
    figures.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let outcome = ending.outcome();
    ctx.store
        .finish_run(&run_id, outcome, &figures, ending.why())
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
    Ok(match ending {
        Ending::Complete => SyncOutcome::Complete { run_id, figures },
        Ending::Partial { why, intent } => SyncOutcome::Partial {
            run_id,
            figures,
            why,
            intent,
        },
        Ending::Failed { why, intent } => SyncOutcome::Failed {
            run_id,
            figures,
            why,
            intent,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spaces(ids: &[u32]) -> HashSet<SpaceAddress> {
        ids.iter()
            .map(|i| format!("space:github-repo:github.com/{i}").parse().unwrap())
            .collect()
    }

    /// Which pages must finish, oldest first, before one holding `ids`
    /// starts.
    fn waits_for(lanes: &mut Lanes<&'static str>, ids: &[u32]) -> Vec<&'static str> {
        let held = spaces(ids);
        std::iter::from_fn(|| lanes.before(&held)).collect()
    }

    #[test]
    fn a_page_waits_for_a_free_lane_and_for_every_earlier_page_sharing_a_space() {
        let mut lanes = Lanes::new(3);
        assert!(waits_for(&mut lanes, &[1, 2]).is_empty());
        lanes.start(spaces(&[1, 2]), "p1");
        // Disjoint, and a lane is free: it runs beside p1.
        assert!(waits_for(&mut lanes, &[3, 4]).is_empty());
        lanes.start(spaces(&[3, 4]), "p2");
        // Space 4 is still being written by p2: this page's reading of it
        // lands after p2's, and p1, older still, finishes first.
        assert_eq!(waits_for(&mut lanes, &[4, 5]), ["p1", "p2"]);
        lanes.start(spaces(&[4, 5]), "p3");
        assert!(waits_for(&mut lanes, &[6]).is_empty());
        lanes.start(spaces(&[6]), "p4");
        assert!(waits_for(&mut lanes, &[7]).is_empty());
        lanes.start(spaces(&[7]), "p5");
        // Every lane taken: the oldest finishes first, and only it.
        assert_eq!(waits_for(&mut lanes, &[8]), ["p3"]);
        lanes.start(spaces(&[8]), "p6");
        assert_eq!(
            std::iter::from_fn(|| lanes.oldest()).collect::<Vec<_>>(),
            ["p4", "p5", "p6"]
        );
        // One lane (SQLite): strictly one page after another.
        let mut one = Lanes::new(0);
        one.start(spaces(&[1]), "a");
        assert_eq!(waits_for(&mut one, &[2]), ["a"]);
    }
}
