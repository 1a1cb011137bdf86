use anyhow::{Context, Result, bail};
use cmcp_domain::{ConnectionSpec, Owner, Platform, Token};
use cmcp_registry::NewConnection;

use super::when;
use crate::app::App;
use crate::cli::{AddCmd, ConnectionCmd};

pub async fn run(app: &App, cmd: ConnectionCmd) -> Result<()> {
    match cmd {
        ConnectionCmd::Add(AddCmd::Github {
            org,
            token_file,
            base_url,
            id,
            person,
        }) => {
            let token = read_token_file(&token_file)?;
            let id = id.unwrap_or_else(|| default_id("github", &org));
            let owner = person.map_or(Owner::Company, Owner::Person);
            let actor = format!("cli:{}", whoami());
            let row = app
                .store
                .create_connection(
                    &app.cipher,
                    NewConnection {
                        id,
                        spec: ConnectionSpec {
                            platform: Platform::Github,
                            scope: org,
                            base_url,
                        },
                        owner,
                        token,
                        settings: serde_json::json!({}),
                    },
                    &actor,
                )
                .await?;
            println!(
                "added connection {} ({} {} via {})",
                row.id, row.platform, row.scope, row.base_url
            );
            println!(
                "the token is sealed at rest and will not be shown again; run: cmcp-discovery sync {} --wait",
                row.id
            );
            Ok(())
        }
        ConnectionCmd::List { json } => list(app, json).await,
    }
}

async fn list(app: &App, json: bool) -> Result<()> {
    let rows = app.store.list_connections().await?;
    let mut out = Vec::new();
    for row in rows {
        let last = app.store.last_run(&row.id).await?;
        out.push((row, last));
    }
    if json {
        let v: Vec<_> = out
            .iter()
            .map(|(c, r)| serde_json::json!({ "connection": c, "last_run": r }))
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
