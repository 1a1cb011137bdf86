//! `people link-github|unlink|accounts`: a person's own GitHub, linked
//! from the command line exactly as `POST /v1/people/{person}/github` does;
//! `people suggestions|decide|requests`: what their private spaces match.

use anyhow::Result;
use cmcp_registry::{SuggestionAnswer, SuggestionRow};
use cmcp_worker::people::{LinkGithub, link_github};

use super::connection::read_token_file;
use crate::app::App;
use crate::cli::PeopleCmd;

pub async fn run(app: &App, cmd: PeopleCmd) -> Result<()> {
    match cmd {
        PeopleCmd::LinkGithub {
            person,
            token_file,
            base_url,
            json,
        } => {
            let token = read_token_file(&token_file)?;
            let linked = link_github(
                &app.store,
                &app.cipher,
                app.cfg.http.clone(),
                LinkGithub {
                    person,
                    token,
                    base_url,
                    actor: "cli".to_owned(),
                },
            )
            .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&linked)?);
                return Ok(());
            }
            println!(
                "linked GitHub account {} for {} as connection {}; first sync queued",
                linked.login, linked.person, linked.connection_id
            );
            for r in &linked.risks {
                println!("risk ({}): {}", r.code, r.message);
            }
            Ok(())
        }
        PeopleCmd::Unlink {
            person,
            connection,
            json,
        } => {
            let gone = app
                .store
                .unlink_connection(&person, &connection, "cli")
                .await?;
            if json {
                let v = serde_json::json!({
                    "person": person,
                    "connection": connection,
                    "sightings_removed": gone.sightings,
                    "tombstoned": gone.tombstoned,
                });
                println!("{}", serde_json::to_string_pretty(&v)?);
                return Ok(());
            }
            println!(
                "unlinked {connection}: token erased, {} sightings removed, {} spaces tombstoned",
                gone.sightings, gone.tombstoned
            );
            Ok(())
        }
        PeopleCmd::Accounts { person, json } => {
            let rows = app.store.person_connections(&person).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
                return Ok(());
            }
            println!("{:<40} {:<24} RISKS", "CONNECTION", "ACCOUNT");
            for c in rows {
                let risks: Vec<&str> = c.risks.iter().map(|r| r.code.as_str()).collect();
                println!("{:<40} {:<24} {}", c.id, c.scope, risks.join(","));
            }
            Ok(())
        }
        PeopleCmd::Suggestions { person, json } => {
            print_suggestions(&app.store.list_suggestions(&person).await?, json)
        }
        PeopleCmd::Decide {
            person,
            id,
            decision,
        } => {
            let answer = if decision == "accept" {
                SuggestionAnswer::Accept
            } else {
                SuggestionAnswer::Decline
            };
            let row = app
                .store
                .decide_suggestion(&person, id, answer, "cli")
                .await?;
            println!("suggestion {id} ({}) is {}", row.kind, row.state);
            Ok(())
        }
        PeopleCmd::Requests { json } => print_suggestions(&app.store.list_requests().await?, json),
    }
}

fn print_suggestions(rows: &[SuggestionRow], json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(rows)?);
        return Ok(());
    }
    println!(
        "{:<6} {:<18} {:<9} {:<5} {:<28} {:<24} EVIDENCE",
        "ID", "KIND", "STATE", "CONF", "SPACE", "PLACE"
    );
    for r in rows {
        let space = r
            .space_name
            .clone()
            .unwrap_or_else(|| r.space_address.to_string());
        let place = r
            .place_id
            .clone()
            .or_else(|| r.create_name.as_ref().map(|n| format!("new: {n}")))
            .unwrap_or_default();
        println!(
            "{:<6} {:<18} {:<9} {:<5} {:<28} {:<24} {}",
            r.id,
            r.kind,
            r.state,
            r.confidence,
            space,
            place,
            r.evidence_text.join("; ")
        );
    }
    Ok(())
}
