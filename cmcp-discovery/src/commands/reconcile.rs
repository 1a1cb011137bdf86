//! `reconcile` and `drift`: run a reconcile now, and read what the latest
//! ones found.

use std::time::Duration;

use anyhow::{Result, bail};
use cmcp_domain::{RunOutcome, RunTrigger};
use cmcp_worker::SyncConnection;

use super::sync::{print_run, sync_and_wait_for};
use super::when;
use crate::app::App;

pub async fn run(
    app: &App,
    connection: Option<&str>,
    wait: bool,
    timeout_secs: u64,
    json: bool,
) -> Result<()> {
    let ids: Vec<String> = match connection {
        // Fail on an unknown connection before queueing anything.
        Some(c) => vec![app.store.get_connection(c).await?.id],
        None => app
            .store
            .list_connections()
            .await?
            .into_iter()
            .filter(|c| c.status.reads())
            .map(|c| c.id)
            .collect(),
    };
    if !wait {
        for id in &ids {
            app.queue()
                .push(SyncConnection::new(id, RunTrigger::Reconcile), None, None)
                .await?;
            if !json {
                println!("reconcile of {id} queued; a worker (serve or worker) will pick it up");
            }
        }
        if json {
            let v = serde_json::json!({ "queued": ids });
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
        return Ok(());
    }
    let timeout = Duration::from_secs(timeout_secs);
    let mut failed = Vec::new();
    let mut runs = Vec::new();
    for id in &ids {
        let job = SyncConnection::awaited(id, RunTrigger::Reconcile);
        let run_id = job.run_id.clone().unwrap_or_default();
        app.queue().push(job, None, None).await?;
        let run = sync_and_wait_for(app, &run_id, &format!("reconcile {id}"), timeout).await?;
        if !json {
            print_run(&run);
        }
        if run.outcome != RunOutcome::Complete {
            failed.push(format!("{id} ended {}", run.outcome.as_str()));
        }
        runs.push(run);
    }
    let drift = app.store.drift_report(connection).await?;
    if json {
        let v = serde_json::json!({ "runs": runs, "drift": drift });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for line in &drift {
            println!("{}: {}", line.connection_id, line.summary);
        }
    }
    if !failed.is_empty() {
        bail!("reconcile: {}", failed.join("; "));
    }
    Ok(())
}

pub async fn drift(app: &App, connection: Option<&str>, json: bool) -> Result<()> {
    let lines = app.store.drift_report(connection).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&lines)?);
        return Ok(());
    }
    for l in &lines {
        let at = l.finished_at.map(when).unwrap_or_default();
        println!("{}: {} {at}", l.connection_id, l.summary);
        if let Some(hint) = &l.hint {
            println!("  flagged: {hint}");
        }
    }
    Ok(())
}
