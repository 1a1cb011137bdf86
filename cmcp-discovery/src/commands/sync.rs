use std::time::Duration;

use anyhow::{Result, bail};
use cmcp_domain::{RunOutcome, RunTrigger};
use cmcp_registry::{Store, SyncRunRow};
use cmcp_worker::{SyncConnection, WorkerOptions, run_workers};

use super::when;
use crate::app::App;

pub async fn run(
    app: &App,
    connection: &str,
    wait: bool,
    timeout_secs: u64,
    json: bool,
) -> Result<()> {
    // Fail on an unknown connection before queueing anything.
    app.store.get_connection(connection).await?;
    if !wait {
        app.queue()
            .push(SyncConnection::new(connection, RunTrigger::Cli), None, None)
            .await?;
        if json {
            println!(
                "{}",
                serde_json::json!({"connection": connection, "queued": true})
            );
        } else {
            println!("sync of {connection} queued; a worker (serve or worker) will pick it up");
        }
        return Ok(());
    }
    // The job names its run, so what is reported is this run, whichever
    // worker ran it and whatever other syncs of the connection ran too.
    let job = SyncConnection::awaited(connection, RunTrigger::Cli);
    let run_id = job.run_id.clone().unwrap_or_default();
    app.queue().push(job, None, None).await?;
    let label = format!("sync {connection}");
    let run = sync_and_wait_for(app, &run_id, &label, Duration::from_secs(timeout_secs)).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&run)?);
    } else {
        print_run(&run);
    }
    match run.outcome {
        RunOutcome::Complete => Ok(()),
        RunOutcome::Partial => Err(super::PartialRun(format!(
            "sync of {connection} ended partial: some pages failed, so nothing was marked missing"
        ))
        .into()),
        other => bail!("sync of {connection} ended {}", other.as_str()),
    }
}

/// Run a worker in this process until the run `run_id` finishes (another
/// worker of the fleet may be the one to run it).
pub(super) async fn sync_and_wait_for(
    app: &App,
    run_id: &str,
    label: &str,
    timeout: Duration,
) -> Result<SyncRunRow> {
    let opts = WorkerOptions::unique("cli");
    let state = app.worker_state(&opts);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let worker = tokio::spawn(run_workers(state, opts, async move {
        let _ = stop_rx.await;
    }));
    let mut progress = super::progress::Progress::new(label);
    let result =
        tokio::time::timeout(timeout, wait_for_run_id(&app.store, run_id, &mut progress)).await;
    progress.finish();
    let _ = stop_tx.send(());
    let _ = worker.await;
    match result {
        Ok(run) => run,
        Err(_) => bail!("run {run_id} did not finish within {timeout:?}"),
    }
}

/// Waits until the run `run_id` exists and is no longer running, showing
/// the figures its worker records while it goes.
async fn wait_for_run_id(
    store: &Store,
    run_id: &str,
    progress: &mut super::progress::Progress,
) -> Result<SyncRunRow> {
    loop {
        match store.get_run(run_id).await {
            Ok(run) if run.outcome != RunOutcome::Running => return Ok(run),
            Ok(run) => progress.update(&run),
            Err(cmcp_registry::RegistryError::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(feature = "demo")]
pub async fn wait_for_run(store: &Store, connection: &str, since: i64) -> Result<SyncRunRow> {
    loop {
        let runs = store.list_runs(Some(connection), 5).await?;
        if let Some(run) = runs
            .into_iter()
            .find(|r| r.started_at >= since && r.outcome != RunOutcome::Running)
        {
            return Ok(run);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn print_run(r: &SyncRunRow) {
    let f = &r.figures;
    println!(
        "run {} of {}: {} (started {})",
        r.id,
        r.connection_id,
        r.outcome.as_str(),
        when(r.started_at)
    );
    println!(
        "  pages {}  requests {}  not-modified {}  retries {}  rate-limit waits {}",
        f.pages, f.requests, f.not_modified, f.retries, f.rate_limit_waits
    );
    println!(
        "  seen {}  created {}  updated {}  renamed {}  unchanged {}  missing {}  duration {} ms",
        f.items_seen, f.created, f.updated, f.renamed, f.unchanged, f.missing, f.duration_ms
    );
    if let Some(e) = &r.error {
        println!("  error: {e}");
    }
}

pub async fn runs(app: &App, connection: Option<&str>, limit: i64, json: bool) -> Result<()> {
    // A connection that does not exist is an error, not an empty list.
    if let Some(c) = connection {
        app.store.get_connection(c).await?;
    }
    let runs = app.store.list_runs(connection, limit).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&runs)?);
    } else if runs.is_empty() {
        match connection {
            Some(c) => println!("no runs of {c} yet: `cmcp-discovery sync {c}` starts one"),
            None => println!("no runs yet"),
        }
    } else {
        for r in &runs {
            print_run(r);
        }
    }
    Ok(())
}
