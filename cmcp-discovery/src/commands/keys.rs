//! `keys create|list|revoke`: API keys for the admin API and screen. The
//! key is printed once at creation; only its hash is stored.

use anyhow::Result;

use crate::app::App;
use crate::cli::KeysCmd;

pub async fn run(app: &App, cmd: KeysCmd) -> Result<()> {
    match cmd {
        KeysCmd::Create {
            role,
            powers,
            name,
            person,
            json,
        } => {
            let powers: Vec<String> = powers
                .iter()
                .flat_map(|p| p.split(','))
                .map(|p| p.trim().to_owned())
                .filter(|p| !p.is_empty())
                .collect();
            let (row, secret) = cmcp_admin::create_key_for(
                &app.store,
                &name,
                &role,
                &powers,
                person.as_deref(),
                "cli",
            )
            .await?;
            if json {
                // The only time the key is ever shown, as in the text form.
                let mut v = serde_json::to_value(&row)?;
                v["key"] = serde_json::Value::String(secret.clone());
                println!("{}", serde_json::to_string_pretty(&v)?);
                return Ok(());
            }
            println!(
                "created {} ({}, role {}, powers [{}])",
                row.id, row.name, row.role, row.powers
            );
            println!("key (shown once, keep it safe): {secret}");
            Ok(())
        }
        KeysCmd::List { json } => {
            let keys = app.store.list_api_keys().await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&keys)?);
                return Ok(());
            }
            println!(
                "{:<22} {:<8} {:<22} {:<8} NAME",
                "ID", "ROLE", "POWERS", "STATE"
            );
            for k in keys {
                let state = if k.revoked_at.is_some() {
                    "revoked"
                } else {
                    "live"
                };
                println!(
                    "{:<22} {:<8} {:<22} {:<8} {}",
                    k.id, k.role, k.powers, state, k.name
                );
            }
            Ok(())
        }
        KeysCmd::Revoke { id, json } => {
            let revoked = app.store.revoke_api_key(&id, "cli").await?;
            if json {
                let v = serde_json::json!({ "id": id, "revoked_now": revoked });
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else if revoked {
                println!("revoked {id}; its sessions are ended");
            } else {
                println!("{id} was already revoked");
            }
            Ok(())
        }
    }
}
