//! `connection webhook-info` and `connection rotate-secret`: what an admin
//! needs to register a connection's webhook on its platform, and the
//! rotation of its secret. The secret is shown only when asked, and showing
//! it is audited.

use anyhow::Result;
use cmcp_domain::Platform;
use cmcp_registry::NewAuditEntry;

use crate::app::App;
use crate::cli::ConnectionCmd;

pub async fn run(app: &App, cmd: ConnectionCmd) -> Result<()> {
    match cmd {
        ConnectionCmd::WebhookInfo {
            connection,
            show_secret,
            json,
        } => info(app, &connection, show_secret, json).await,
        ConnectionCmd::RotateSecret {
            connection,
            overlap_secs,
            json,
        } => rotate(app, &connection, overlap_secs, json).await,
        other => anyhow::bail!("not a webhook command: {other:?}"),
    }
}

/// `<public_url>/hooks/<platform>/<connection>`.
pub fn hook_url(public_url: &str, platform: Platform, connection: &str) -> String {
    format!(
        "{}/hooks/{}/{}",
        public_url.trim_end_matches('/'),
        platform.as_str(),
        connection
    )
}

/// The steps to register the hook on the platform, in the platform's words.
pub fn steps(platform: Platform, url: &str) -> Vec<String> {
    match platform {
        Platform::Github => vec![
            "GitHub: Organization settings > Webhooks > Add webhook (an organization webhook).".into(),
            format!("Payload URL: {url}"),
            "Content type: application/json".into(),
            "Secret: the secret shown by --show-secret".into(),
            "Events: 'Let me select individual events' > Repositories; also Organization and Meta (hook deleted).".into(),
            "Active: checked. GitHub sends a ping first; it is acknowledged.".into(),
        ],
        Platform::Bitbucket => vec![
            "Bitbucket Cloud: Workspace settings > Webhooks > Add webhook (a workspace webhook).".into(),
            format!("URL: {url}"),
            "Secret: the secret shown by --show-secret (without it deliveries are refused)".into(),
            "Triggers: Repository > Created, Deleted, Updated, Transfer accepted; Project > Updated.".into(),
            "Projects have no created/deleted hook: they are still found by the scheduled sync.".into(),
        ],
        Platform::Jira => vec![
            "Jira Cloud: Settings > System > WebHooks > Create a WebHook (an admin webhook).".into(),
            format!("URL: {url}"),
            "Secret: the secret shown by --show-secret".into(),
            "Events: Project > created, updated, deleted, soft deleted, restored, archived, restored from archive.".into(),
        ],
        Platform::Drive => vec![
            "Google Drive: nothing to register. Change channels are opened automatically (changes.watch) while the connection is enabled.".into(),
        ],
    }
}

async fn info(app: &App, connection: &str, show_secret: bool, json: bool) -> Result<()> {
    let row = app.store.get_connection(connection).await?;
    // Connections made before webhooks existed get their secret now.
    let secret = app
        .store
        .current_webhook_secret(&app.cipher, &row.id)
        .await?;
    let url = hook_url(&app.cfg.public_url, row.platform, &row.id);
    let steps = steps(row.platform, &url);
    // Drive notifications carry no secret: there is none to show.
    let shown = show_secret && row.platform != Platform::Drive;
    if shown {
        app.store
            .append_audit(&NewAuditEntry {
                actor: format!("cli:{}", whoami()),
                action: "connection.webhook-secret-shown".to_owned(),
                target: format!("connection:{}", row.id),
                reason: None,
                before: None,
                after: None,
            })
            .await?;
    }
    if json {
        let value = serde_json::json!({
            "connection": row.id,
            "platform": row.platform,
            "scope": row.scope,
            "url": url,
            "steps": steps,
            "secret": shown.then(|| secret.expose().to_owned()),
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    println!("connection {} ({} {})", row.id, row.platform, row.scope);
    println!("webhook url: {url}");
    for step in steps {
        println!("  - {step}");
    }
    if shown {
        println!("secret: {}", secret.expose());
    } else if row.platform != Platform::Drive {
        println!("secret: [hidden] (add --show-secret to print it; that is audited)");
    }
    Ok(())
}

async fn rotate(app: &App, connection: &str, overlap_secs: u64, json: bool) -> Result<()> {
    let overlap_ms = i64::try_from(overlap_secs.saturating_mul(1000)).unwrap_or(i64::MAX);
    app.store
        .rotate_webhook_secret(
            &app.cipher,
            connection,
            overlap_ms,
            &format!("cli:{}", whoami()),
        )
        .await?;
    if json {
        // The new secret is shown only by `webhook-info --show-secret`.
        let v = serde_json::json!({
            "connection": connection,
            "rotated": true,
            "old_secret_valid_secs": overlap_secs,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "new webhook secret made for {connection}; the old one keeps working for {overlap_secs}s. \
         Update the platform with: cmcp-discovery connection webhook-info {connection} --show-secret"
    );
    Ok(())
}

fn whoami() -> String {
    std::env::var("USER").unwrap_or_else(|_| "unknown".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hook_url_joins_the_public_base() {
        assert_eq!(
            hook_url(
                "https://hooks.example.com/",
                Platform::Github,
                "github-acme"
            ),
            "https://hooks.example.com/hooks/github/github-acme"
        );
    }

    #[test]
    fn github_steps_name_the_content_type_and_events() {
        let s = steps(Platform::Github, "u").join("\n");
        assert!(s.contains("application/json"), "{s}");
        assert!(s.contains("Repositories"), "{s}");
        assert!(steps(Platform::Drive, "u")[0].contains("automatically"));
    }
}
