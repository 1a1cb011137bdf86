use anyhow::{Context, Result, bail};
use cmcp_domain::{ConnectionSpec, Credential, Owner, Platform, Token};
use cmcp_registry::NewConnection;

use super::when;
use crate::app::App;
use crate::cli::{AddArgs, AddCmd, ConnectionCmd};

pub async fn run(app: &App, cmd: ConnectionCmd) -> Result<()> {
    match cmd {
        ConnectionCmd::ConfirmMissing {
            connection,
            reason,
            json,
        } => {
            let actor = format!("cli:{}", whoami());
            let marked = app
                .store
                .confirm_missing(&connection, &actor, &reason)
                .await?;
            if json {
                let v = serde_json::json!({ "connection": connection, "marked_missing": marked });
                println!("{}", serde_json::to_string_pretty(&v)?);
                return Ok(());
            }
            println!("{connection}: {marked} spaces marked missing; the hold is over");
            Ok(())
        }
        ConnectionCmd::Add(AddArgs {
            json,
            platform:
                AddCmd::Github {
                    org,
                    token_file,
                    base_url,
                    web_host,
                    id,
                    person,
                },
        }) => {
            // The tenant comes from this configuration: refuse one that
            // cannot give it before anything is stored.
            let tenant = cmcp_domain::github_tenant(&base_url, web_host.as_deref())?;
            let settings = match &web_host {
                Some(_) => serde_json::json!({ (cmcp_domain::WEB_HOST_SETTING): tenant }),
                None => serde_json::json!({}),
            };
            let token = read_token_file(&token_file)?;
            let id = id.unwrap_or_else(|| default_id("github", &org));
            let owner = person.map_or(Owner::Company, Owner::Person);
            let row = create(
                app,
                NewConnection {
                    id,
                    spec: ConnectionSpec {
                        platform: Platform::Github,
                        scope: org,
                        base_url,
                    },
                    owner,
                    token,
                    settings,
                },
            )
            .await?;
            added(
                &row,
                &format!("via {}, tenant {tenant}", row.base_url),
                "token",
                json,
            )
        }
        ConnectionCmd::Add(AddArgs {
            json,
            platform:
                AddCmd::Bitbucket {
                    workspace,
                    token_file,
                    email,
                    base_url,
                    id,
                },
        }) => {
            let raw = read_token_file(&token_file)?;
            // The connector reads the credential kind from the text:
            // `basic:<email>:<token>` (API token) or `bearer:<token>`.
            let token = match email {
                Some(e) => Credential::Basic {
                    user: e.trim().to_owned(),
                    secret: raw.expose().to_owned(),
                }
                .to_token(),
                None => Credential::Bearer(raw.expose().to_owned()).to_token(),
            };
            let id = id.unwrap_or_else(|| default_id("bitbucket", &workspace));
            add_atlassian(
                app,
                id,
                Platform::Bitbucket,
                workspace,
                base_url,
                token,
                json,
            )
            .await
        }
        ConnectionCmd::Add(AddArgs {
            json,
            platform:
                AddCmd::Jira {
                    site,
                    token_file,
                    email,
                    scoped,
                    cloud_id,
                    id,
                },
        }) => {
            let raw = read_token_file(&token_file)?;
            // A bare host (`acme.atlassian.net`, as the README writes it) is
            // the site over https.
            let site_text = match site.trim() {
                s if s.contains("://") => s.to_owned(),
                s => format!("https://{s}"),
            };
            let site_url = url::Url::parse(&site_text).with_context(|| {
                format!("--site {site:?} is not a site (e.g. acme.atlassian.net)")
            })?;
            let Some(host) = site_url.host_str().map(str::to_ascii_lowercase) else {
                bail!("--site {site:?} has no host");
            };
            let scope = match site_url.port() {
                Some(port) => format!("{host}:{port}"),
                None => host,
            };
            let base_url = match (scoped, cloud_id) {
                (true, Some(cloud)) => {
                    format!("https://api.atlassian.com/ex/jira/{}", cloud.trim())
                }
                (true, None) => bail!("--scoped needs --cloud-id"),
                (false, _) => site_url.as_str().trim_end_matches('/').to_owned(),
            };
            let token = Credential::Basic {
                user: email.trim().to_owned(),
                secret: raw.expose().to_owned(),
            }
            .to_token();
            let id = id.unwrap_or_else(|| default_id("jira", &scope));
            add_atlassian(app, id, Platform::Jira, scope, base_url, token, json).await
        }
        ConnectionCmd::Add(AddArgs {
            json,
            platform:
                AddCmd::Drive {
                    domain,
                    service_account_file,
                    subject,
                    depth,
                    domain_admin_access,
                    base_url,
                    token_url,
                    id,
                },
        }) => {
            add_drive(
                app,
                DriveArgs {
                    domain,
                    service_account_file,
                    subject,
                    depth,
                    domain_admin_access,
                    base_url,
                    token_url,
                    id,
                },
                json,
            )
            .await
        }
        ConnectionCmd::List { json } => list(app, json).await,
        cmd @ (ConnectionCmd::WebhookInfo { .. } | ConnectionCmd::RotateSecret { .. }) => {
            super::webhooks::run(app, cmd).await
        }
    }
}

struct DriveArgs {
    domain: String,
    service_account_file: std::path::PathBuf,
    subject: String,
    depth: u32,
    domain_admin_access: bool,
    base_url: String,
    token_url: Option<String>,
    id: Option<String>,
}

/// A Drive connection: the token is the whole service-account JSON key; the
/// settings say whom to impersonate and how deep to list. The key and the
/// settings are checked (by building the connector) before anything is
/// stored.
async fn add_drive(app: &App, a: DriveArgs, json: bool) -> Result<()> {
    let key = std::fs::read_to_string(&a.service_account_file).with_context(|| {
        format!(
            "cannot read service-account file {}",
            a.service_account_file.display()
        )
    })?;
    let token = Token::new(key.trim());
    let domain = a.domain.trim().to_ascii_lowercase();
    let settings = cmcp_connectors::drive::DriveSettings {
        subject: a.subject.trim().to_owned(),
        depth: a.depth,
        domain_admin_access: a.domain_admin_access,
        token_url: a.token_url,
        tokeninfo_url: None,
    };
    let spec = ConnectionSpec {
        platform: Platform::Drive,
        scope: domain.clone(),
        base_url: a.base_url,
    };
    let settings_json = serde_json::to_value(&settings).context("drive settings")?;
    cmcp_connectors::build(
        &spec,
        &settings_json,
        token.clone(),
        cmcp_connectors::ConnectorDeps::default(),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let id = a.id.unwrap_or_else(|| default_id("drive", &domain));
    let row = create(
        app,
        NewConnection {
            id,
            spec,
            owner: Owner::Company,
            token,
            settings: settings_json,
        },
    )
    .await?;
    added(
        &row,
        &format!("as {}, depth {}", settings.subject, settings.depth),
        "service-account key",
        json,
    )
}

async fn add_atlassian(
    app: &App,
    id: String,
    platform: Platform,
    scope: String,
    base_url: String,
    token: Token,
    json: bool,
) -> Result<()> {
    // Refuse what cannot work (an app password, a bad URL) before storing it.
    let spec = ConnectionSpec {
        platform,
        scope,
        base_url,
    };
    if let Err(e) = cmcp_connectors::build(
        &spec,
        &serde_json::json!({}),
        token.clone(),
        cmcp_connectors::ConnectorDeps::default(),
    ) {
        bail!("{e}");
    }
    let row = create(
        app,
        NewConnection {
            id,
            spec,
            owner: Owner::Company,
            token,
            settings: serde_json::json!({}),
        },
    )
    .await?;
    added(&row, &format!("via {}", row.base_url), "token", json)
}

/// Tells what was added: a line for a person, or the row (never its
/// credential) as JSON.
fn added(row: &cmcp_registry::ConnectionRow, how: &str, secret: &str, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(row)?);
        return Ok(());
    }
    println!(
        "added connection {} ({} {} {how})",
        row.id, row.platform, row.scope
    );
    println!(
        "the {secret} is sealed at rest and will not be shown again; run: cmcp-discovery sync {} --wait",
        row.id
    );
    Ok(())
}

/// Store a new connection (sealed token, audited) and give it its webhook
/// secret, so `webhook-info` has something to print.
async fn create(app: &App, new: NewConnection) -> Result<cmcp_registry::ConnectionRow> {
    let actor = format!("cli:{}", whoami());
    let row = app
        .store
        .create_connection(&app.cipher, new, &actor)
        .await?;
    app.store
        .ensure_webhook_secret(&app.cipher, &row.id)
        .await?;
    Ok(row)
}

async fn list(app: &App, json: bool) -> Result<()> {
    let rows = app.store.list_connections().await?;
    let mut out = Vec::new();
    for row in rows {
        let last = app.store.last_run(&row.id).await?;
        out.push((row, last));
    }
    // Each credential's shared rate budget, as the fleet last learned it.
    let budgets: std::collections::HashMap<String, cmcp_registry::BudgetRow> =
        app.store.connection_budgets().await?.into_iter().collect();
    if json {
        let v: Vec<_> = out
            .iter()
            .map(|(c, r)| {
                serde_json::json!({ "connection": c, "last_run": r, "rate_budget": budgets.get(&c.id) })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    if out.is_empty() {
        println!(
            "no connections; add one with: cmcp-discovery connection add github --org ORG --token-file FILE"
        );
    }
    for (c, last) in out {
        println!(
            "{}  {} {}  owner={}  status={}  base={}",
            c.id, c.platform, c.scope, c.owner, c.status, c.base_url
        );
        for risk in &c.risks {
            println!("    RISK [{}] {}", risk.code, risk.message);
        }
        if let Some(b) = budgets.get(&c.id) {
            println!("    {}", budget_line(b, c.platform));
        }
        match last {
            Some(r) => println!(
                "    last run {} at {}: {} pages, {} requests, {} seen, {} created, {} updated, {} renamed, {} missing, {} ms{}",
                r.outcome.as_str(),
                when(r.started_at),
                r.figures.pages,
                r.figures.requests,
                r.figures.items_seen,
                r.figures.created,
                r.figures.updated,
                r.figures.renamed,
                r.figures.missing,
                r.figures.duration_ms,
                r.error.map(|e| format!(" ({e})")).unwrap_or_default()
            ),
            None => println!("    never synced"),
        }
    }
    Ok(())
}

/// `rate budget 4211/5000, resets at …` (or what is known of it).
fn budget_line(b: &cmcp_registry::BudgetRow, platform: Platform) -> String {
    // Jira and Drive send no budget headers: nothing to show but that.
    if b.remaining.is_none() && b.request_limit.is_none() && b.reset_at.is_none() {
        return format!(
            "rate budget unknown: {platform} sends no budget figures (it paces requests with Retry-After); last request {}",
            when(b.updated_at)
        );
    }
    let remaining = b
        .remaining
        .map_or_else(|| "unknown".to_owned(), |r| r.to_string());
    let limit = b.request_limit.map(|l| format!("/{l}")).unwrap_or_default();
    let reset = match b.reset_at {
        Some(t) => format!(", resets at {}", when(t)),
        None => String::new(),
    };
    let paused = match b.paused_until {
        Some(t) if t > chrono::Utc::now().timestamp_millis() => {
            format!(", paused until {}", when(t))
        }
        _ => String::new(),
    };
    format!("rate budget {remaining}{limit}{reset}{paused}")
}

/// Read a token from a file, with errors that say what is wrong without
/// ever echoing the file's content.
pub fn read_token_file(path: &std::path::Path) -> Result<Token> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read token file {}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        bail!("token file {} is empty", path.display());
    }
    if token.lines().count() > 1 || token.chars().any(char::is_whitespace) {
        bail!(
            "token file {} must hold one token on one line (found whitespace inside)",
            path.display()
        );
    }
    Ok(Token::new(token))
}

fn default_id(platform: &str, scope: &str) -> String {
    let clean: String = scope
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("{platform}-{clean}")
}

fn whoami() -> String {
    std::env::var("USER").unwrap_or_else(|_| "unknown".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file_errors_are_clear_and_never_echo_the_token() {
        let dir = tempfile::tempdir().unwrap();
        let missing = read_token_file(&dir.path().join("nope"))
            .unwrap_err()
            .to_string();
        assert!(missing.contains("cannot read token file"), "{missing}");
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        assert!(
            read_token_file(&empty)
                .unwrap_err()
                .to_string()
                .contains("is empty")
        );
        let two = dir.path().join("two");
        std::fs::write(&two, "ghp_secretA\nghp_secretB\n").unwrap();
        let err = read_token_file(&two).unwrap_err().to_string();
        assert!(!err.contains("ghp_secret"), "{err}");
        let ok = dir.path().join("ok");
        std::fs::write(&ok, "ghp_abc\n").unwrap();
        assert_eq!(read_token_file(&ok).unwrap().expose(), "ghp_abc");
    }

    #[test]
    fn default_ids_are_plain() {
        assert_eq!(default_id("github", "Acme Corp"), "github-acme-corp");
    }
}
