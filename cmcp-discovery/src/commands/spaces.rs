use anyhow::{Result, bail};
use cmcp_domain::{SpaceAddress, SpaceStatus};
use cmcp_registry::{Cursor, Resolution, Resolved, SpaceFilter, Viewer};

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
        SpacesCmd::Resolve {
            alias,
            person,
            json,
        } => match person {
            None => {
                let found = app.store.resolve(&alias).await?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&found)?);
                    return Ok(());
                }
                if found.is_empty() {
                    bail!("no space is known by {alias:?}");
                }
                found.iter().for_each(print_resolution);
                Ok(())
            }
            Some(person) => {
                let viewer = Viewer::Person(person);
                match app.store.resolve_one(&alias, Some(&viewer)).await? {
                    Resolved::Found(r) if json => {
                        println!("{}", serde_json::to_string_pretty(&r)?);
                        Ok(())
                    }
                    Resolved::Found(r) => {
                        print_resolution(&r);
                        Ok(())
                    }
                    Resolved::Ambiguous(all) => {
                        all.iter().for_each(print_resolution);
                        bail!("{alias:?} names {} spaces at the same rank", all.len())
                    }
                    Resolved::Unknown => {
                        bail!("no space this person may see is known by {alias:?}")
                    }
                }
            }
        },
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

fn print_resolution(r: &Resolution) {
    let how = match &r.alias {
        Some(a) if r.retired => format!(
            "via retired {} {:?} (retired {})",
            a.kind,
            a.raw,
            a.valid_to.map(when).unwrap_or_default()
        ),
        Some(a) => format!("via {} {:?}", a.kind, a.raw),
        None => format!("by {}", r.rank),
    };
    println!(
        "{}  {}  [{}]  {how}",
        r.space.address,
        r.space.display_name,
        r.space.status.as_str()
    );
}

/// `changes --after C`: one page of the feed and the cursor to go on from.
pub async fn changes(
    app: &App,
    after: &str,
    limit: i64,
    person: Option<&str>,
    json: bool,
) -> Result<()> {
    let after: Cursor = after.parse()?;
    let viewer = person.map(|p| Viewer::Person(p.to_owned()));
    let page = app.store.changes(after, limit, viewer.as_ref()).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&page)?);
        return Ok(());
    }
    for c in &page.changes {
        println!(
            "{}  {}  {:<16} {}  {}",
            c.cursor,
            when(c.at),
            c.kind.as_str(),
            c.address,
            c.detail
        );
    }
    println!("next: {}", page.next);
    Ok(())
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
