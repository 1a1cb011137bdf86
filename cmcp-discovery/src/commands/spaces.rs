use anyhow::{Result, bail};
use cmcp_domain::{SpaceAddress, SpaceStatus};
use cmcp_registry::SpaceFilter;

use super::when;
use crate::app::App;
use crate::cli::SpacesCmd;

pub async fn run(app: &App, cmd: SpacesCmd) -> Result<()> {
    match cmd {
        SpacesCmd::List {
            connection,
            status,
            limit,
            json,
        } => {
            let status = match status.as_deref() {
                None => None,
                Some(s) => Some(SpaceStatus::parse(s).ok_or_else(|| {
                    anyhow::anyhow!("status must be active, missing or tombstoned")
                })?),
            };
            let spaces = app
                .store
                .list_spaces(&SpaceFilter {
                    connection_id: connection,
                    status,
                    limit,
                    offset: 0,
                })
                .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&spaces)?);
            } else {
                for s in &spaces {
                    let archived = if s.archived { " archived" } else { "" };
                    let vis = s
                        .visibility
                        .map(|v| format!(" {}", v.as_str()))
                        .unwrap_or_default();
                    println!(
                        "{}  {}  [{}{}{}]",
                        s.address,
                        s.display_name,
                        s.status.as_str(),
                        vis,
                        archived
                    );
                }
                println!("{} spaces", spaces.len());
            }
            Ok(())
        }
        SpacesCmd::Resolve { alias, json } => {
            let found = app.store.resolve(&alias).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&found)?);
                return Ok(());
            }
            if found.is_empty() {
                bail!("no space is known by {alias:?}");
            }
            for r in &found {
                let how = match &r.alias {
                    Some(a) if r.retired => format!(
                        "via retired {} {:?} (retired {})",
                        a.kind,
                        a.raw,
                        a.valid_to.map(when).unwrap_or_default()
                    ),
                    Some(a) => format!("via {} {:?}", a.kind, a.raw),
                    None => "by address".to_owned(),
                };
                println!(
                    "{}  {}  [{}]  {how}",
                    r.space.address,
                    r.space.display_name,
                    r.space.status.as_str()
                );
            }
            Ok(())
        }
        SpacesCmd::History { address, json } => {
            let address: SpaceAddress = address.parse()?;
            let history = app.store.alias_history(&address).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&history)?);
            } else {
                print_history(&history);
            }
            Ok(())
        }
    }
}

pub fn print_history(history: &[cmcp_registry::AliasRow]) {
    for a in history {
        let until = match a.valid_to {
            Some(t) => format!("retired {}", when(t)),
            None => "active".to_owned(),
        };
        println!(
            "  {:<10} {:<45} since {}  {until}",
            a.kind.as_str(),
            a.raw,
            when(a.valid_from)
        );
    }
}

pub async fn audit(app: &App, limit: i64, json: bool) -> Result<()> {
    let entries = app.store.list_audit(limit).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&entries)?);
    } else {
        for e in &entries {
            println!(
                "{}  {}  {}  {}{}",
                when(e.at),
                e.actor,
                e.action,
                e.target,
                e.reason
                    .as_ref()
                    .map(|r| format!("  ({r})"))
                    .unwrap_or_default()
            );
        }
    }
    Ok(())
}
