//! `places import FILE.json` / `places list`: cMCP's places as the ADMIN
//! loads them (the same bulk, idempotent load as `PUT /v1/places`), then
//! the mapping proposals are refreshed against them.

use std::path::Path;

use anyhow::{Context, Result};
use cmcp_registry::PlaceInput;

use crate::app::App;
use crate::cli::PlacesCmd;

pub async fn run(app: &App, cmd: PlacesCmd) -> Result<()> {
    match cmd {
        PlacesCmd::Import { file, json } => import(app, &file, json).await,
        PlacesCmd::List { json } => list(app, json).await,
    }
}

async fn import(app: &App, file: &Path, json: bool) -> Result<()> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let places: Vec<PlaceInput> = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a JSON array of places {{id, kind, name, key?, aliases?, members?}}",
            file.display()
        )
    })?;
    let figures = app.store.put_places(&places, "cli").await?;
    let proposals =
        cmcp_matching::refresh_proposals(&app.store, &cmcp_matching::Settings::default()).await?;
    // Who belongs where decides link or request to join.
    let suggestions = cmcp_matching::refresh_all_suggestions(&app.store).await?;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "places": figures,
                "proposals": proposals,
                // As `PUT /v1/places` answers; the error below names them.
                "suggestions": {
                    "refreshed": suggestions.refreshed,
                    "failed": suggestions.failed.len(),
                },
            })
        );
    } else {
        println!(
            "places: {} created, {} updated, {} unchanged, {} retired",
            figures.created, figures.updated, figures.unchanged, figures.retired
        );
        println!(
            "proposals: {} new, {} superseded, {} unchanged",
            proposals.proposed, proposals.superseded, proposals.unchanged
        );
        println!(
            "suggestions: {} people refreshed, {} failed",
            suggestions.refreshed,
            suggestions.failed.len()
        );
    }
    // The places are loaded either way; a script still learns that some
    // people's suggestions were not refreshed (the log says why).
    if !suggestions.failed.is_empty() {
        anyhow::bail!(
            "the places are loaded, but the suggestions of {} could not be refreshed (see the log); \
             their next sync refreshes them, or import again",
            suggestions.failed.join(", ")
        );
    }
    Ok(())
}

async fn list(app: &App, json: bool) -> Result<()> {
    let places = app.store.list_places().await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&places)?);
        return Ok(());
    }
    println!(
        "{:<24} {:<8} {:<10} {:<8} NAME",
        "ID", "KIND", "KEY", "STATUS"
    );
    for p in places {
        println!(
            "{:<24} {:<8} {:<10} {:<8} {}",
            p.id,
            p.kind,
            p.key.as_deref().unwrap_or("-"),
            p.status,
            p.name
        );
    }
    Ok(())
}
