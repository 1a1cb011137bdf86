//! `deliveries list|show|replay`: what became of webhook deliveries, and
//! giving failed ones back to the workers. A replay is audited (who, why).

use anyhow::{Result, bail};
use clap::Subcommand;
use cmcp_registry::{DeliveryFilter, DeliveryRow, DeliveryStatus};

use super::when;
use crate::app::App;

#[derive(Debug, Subcommand)]
pub enum DeliveriesCmd {
    /// Deliveries, newest first.
    List {
        /// `received`, `processed`, `failed` or `ignored`.
        #[arg(long)]
        state: Option<DeliveryStatus>,
        #[arg(long)]
        connection: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: usize,
        #[arg(long)]
        json: bool,
    },
    /// One delivery: its state, attempts, last error and kept headers.
    Show {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Give a failed (or processed) delivery back to the workers.
    Replay {
        /// The delivery; or `--failed` for every failed one.
        id: Option<String>,
        #[arg(long)]
        failed: bool,
        /// Why, for the audit log.
        #[arg(long)]
        reason: Option<String>,
        /// Print the replayed delivery ids as JSON.
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(app: &App, cmd: DeliveriesCmd) -> Result<()> {
    match cmd {
        DeliveriesCmd::List {
            state,
            connection,
            limit,
            json,
        } => {
            let rows = app
                .store
                .find_deliveries(&DeliveryFilter {
                    status: state,
                    connection_id: connection,
                    limit,
                })
                .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                for r in &rows {
                    println!("{}", line(r));
                }
            }
        }
        DeliveriesCmd::Show { id, json } => {
            let r = app.store.get_delivery(&id).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!("{}", line(&r));
                println!(
                    "verification: {}  body: {} bytes",
                    r.verification,
                    r.body.len()
                );
                if let Some(at) = r.next_attempt_at {
                    println!("next attempt: {}", when(at));
                }
                if let Some(e) = &r.error {
                    println!("error: {e}");
                }
                for (k, v) in &r.headers {
                    println!("  {k}: {v}");
                }
            }
        }
        DeliveriesCmd::Replay {
            id,
            failed,
            reason,
            json,
        } => {
            let actor = "cli";
            let ids = match (id, failed) {
                (Some(id), false) => vec![id],
                (None, true) => app
                    .store
                    .find_deliveries(&DeliveryFilter {
                        status: Some(DeliveryStatus::Failed),
                        connection_id: None,
                        limit: 1000,
                    })
                    .await?
                    .into_iter()
                    .map(|r| r.id)
                    .collect(),
                _ => bail!("name one delivery id, or --failed"),
            };
            for id in &ids {
                app.store
                    .replay_delivery(id, actor, reason.as_deref())
                    .await?;
                if !json {
                    println!("replayed {id}");
                }
            }
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({ "replayed": ids }))?
                );
            } else {
                println!("{} deliveries queued again", ids.len());
            }
        }
    }
    Ok(())
}

fn line(r: &DeliveryRow) -> String {
    format!(
        "{}  {}  {:<9}  {}  {}  attempts {}{}",
        r.id,
        when(r.received_at),
        r.status.as_str(),
        r.connection_id,
        r.event,
        r.attempts,
        r.error
            .as_ref()
            .map(|e| format!("  ({e})"))
            .unwrap_or_default()
    )
}
