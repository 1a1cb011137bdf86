//! `doctor`: check a setup before it fails at sync time. Every check says
//! pass or fail and, when it fails, what to do; the command exits 1 when
//! any fails. It changes nothing: no migration runs, no key file is made,
//! no secret is created (unlike starting a process, which does all three).

use std::time::Duration;

use anyhow::Result;
use cmcp_registry::cipher::MASTER_KEY_ENV;
use cmcp_registry::{Cipher, MissingKey, Store};
use serde::Serialize;

use crate::config::Config;

/// How long one connection's credential may take to answer.
const CREDENTIAL_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Debug, Serialize)]
pub struct Check {
    pub check: String,
    pub ok: bool,
    pub detail: String,
    /// What to do about a failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

fn pass(check: impl Into<String>, detail: impl Into<String>) -> Check {
    Check {
        check: check.into(),
        ok: true,
        detail: detail.into(),
        fix: None,
    }
}

fn fail(check: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Check {
    Check {
        check: check.into(),
        ok: false,
        detail: detail.into(),
        fix: Some(fix.into()),
    }
}

pub async fn run(cfg: Config, json: bool) -> Result<()> {
    let checks = checks(&cfg).await;
    if json {
        println!("{}", serde_json::to_string_pretty(&checks)?);
    } else {
        for c in &checks {
            println!(
                "{} {}: {}",
                if c.ok { "pass" } else { "FAIL" },
                c.check,
                c.detail
            );
            if let Some(fix) = &c.fix {
                println!("     fix: {fix}");
            }
        }
    }
    let failed = checks.iter().filter(|c| !c.ok).count();
    if failed > 0 {
        anyhow::bail!("{failed} of {} checks failed", checks.len());
    }
    Ok(())
}

/// Every check, in the order a setup is built: the store, the key, the
/// connections, the public URL, the clock.
pub async fn checks(cfg: &Config) -> Vec<Check> {
    let mut out = Vec::new();
    let url = cfg.database_url();
    // Connecting would create a missing SQLite file: say so instead.
    if let Some(path) = url.strip_prefix("sqlite://").map(std::path::Path::new)
        && !path.exists()
    {
        out.push(fail(
            "store",
            format!("no registry at {}", path.display()),
            "run `cmcp-discovery migrate` to create it, or point --data-dir / --database-url at the existing one",
        ));
        return out;
    }
    let store = match Store::connect(&url, &cfg.store.options(false)).await {
        Ok(s) => s,
        Err(e) => {
            out.push(fail(
                "store",
                e.to_string(),
                "check --database-url / CMCP_DISCOVERY_DATABASE_URL and that the server runs",
            ));
            return out;
        }
    };
    let on_postgres = matches!(store, Store::Postgres(_));
    out.push(pass(
        "store",
        format!("reachable ({})", cmcp_registry::store::redact_url(&url)),
    ));
    match store.pending_migrations().await {
        Ok(p) if p.is_empty() => out.push(pass("migrations", "the schema is current")),
        Ok(p) => out.push(fail(
            "migrations",
            format!("{} not applied (first {})", p.len(), p[0]),
            "run `cmcp-discovery migrate` (every process also migrates at start)",
        )),
        Err(e) => out.push(fail(
            "migrations",
            e.to_string(),
            "check the database user's rights",
        )),
    }
    let env_key = std::env::var(MASTER_KEY_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty());
    if on_postgres {
        out.push(match env_key {
            Some(_) => pass("master key source", format!("{MASTER_KEY_ENV} is set")),
            None => fail(
                "master key source",
                format!("{MASTER_KEY_ENV} is not set"),
                format!(
                    "give every fleet member the same key in {MASTER_KEY_ENV}; a fleet never uses key files"
                ),
            ),
        });
    }
    let cipher = match Cipher::load(env_key.as_deref(), &cfg.key_file(), MissingKey::Refuse) {
        Ok((c, source)) => {
            out.push(pass("master key", format!("loaded from {source}")));
            Some(c)
        }
        Err(e) => {
            out.push(fail(
                "master key",
                e.to_string(),
                "restore the key file or set the variable to the fleet's key",
            ));
            None
        }
    };
    let connections = match store.list_connections().await {
        Ok(c) => c,
        Err(e) => {
            out.push(fail(
                "connections",
                e.to_string(),
                "run `cmcp-discovery migrate`",
            ));
            return out;
        }
    };
    if let Some(cipher) = &cipher {
        out.push(sealed_values(&store, cipher, &connections).await);
        for c in connections.iter().filter(|c| c.status.reads()) {
            out.push(credential(&store, cipher, cfg, c).await);
        }
    }
    out.push(public_url(cfg, !connections.is_empty()));
    out.push(clock(&store, cfg).await);
    out
}

/// Opens every connection's token and every live webhook secret.
async fn sealed_values(
    store: &Store,
    cipher: &Cipher,
    connections: &[cmcp_registry::ConnectionRow],
) -> Check {
    let (mut opened, mut failed) = (0usize, Vec::new());
    for c in connections {
        match store.connection_token(cipher, &c.id).await {
            Ok(_) => opened += 1,
            Err(_) => failed.push(format!("token of {}", c.id)),
        }
        match store.webhook_secrets(cipher, &c.id).await {
            Ok(s) => opened += s.len(),
            Err(_) => failed.push(format!("webhook secrets of {}", c.id)),
        }
    }
    if failed.is_empty() {
        pass(
            "sealed values",
            format!("the master key opens all {opened} stored tokens and secrets"),
        )
    } else {
        fail(
            "sealed values",
            format!("cannot open: {}", failed.join(", ")),
            "this is not the key these were sealed with: use the fleet's key",
        )
    }
}

/// Whether the connection's credential still reads its container, with the
/// risks its last listing recorded (write scopes and the like).
async fn credential(
    store: &Store,
    cipher: &Cipher,
    cfg: &Config,
    c: &cmcp_registry::ConnectionRow,
) -> Check {
    let name = format!("credential of {}", c.id);
    let connector = match cmcp_worker::budget::connector(store, cipher, &cfg.http, c).await {
        Ok(Ok(connector)) => connector,
        Ok(Err(e)) => {
            return fail(
                name,
                e.to_string(),
                "fix the connection's settings or token",
            );
        }
        Err(e) => return fail(name, e.to_string(), "check the store"),
    };
    let risks: Vec<String> = c.risks.iter().map(|r| r.message.clone()).collect();
    let risks = if risks.is_empty() {
        String::new()
    } else {
        format!("; risks: {}", risks.join("; "))
    };
    match tokio::time::timeout(CREDENTIAL_TIMEOUT, connector.container_readable()).await {
        Ok(Ok(true)) => pass(name, format!("reads {} {}{risks}", c.platform, c.scope)),
        Ok(Ok(false)) => fail(
            name,
            format!("refused: cannot read {} {}", c.platform, c.scope),
            "the token was revoked, expired or lost access: make a new read-only one and `connection add` it again",
        ),
        Ok(Err(e)) => fail(
            name,
            e.to_string(),
            "check the base URL and that the platform is reachable from here",
        ),
        Err(_) => fail(
            name,
            format!("no answer within {CREDENTIAL_TIMEOUT:?}"),
            "check the base URL and the network path to the platform",
        ),
    }
}

/// Platforms deliver webhooks to the public URL: it must be set and must
/// not be a loopback address once there are connections to deliver for.
fn public_url(cfg: &Config, webhooks_expected: bool) -> Check {
    let name = "public url";
    let parsed = url::Url::parse(cfg.public_url.trim());
    let loopback = parsed
        .as_ref()
        .ok()
        .and_then(|u| u.host())
        .is_some_and(|h| match h {
            url::Host::Domain(d) => d.eq_ignore_ascii_case("localhost"),
            url::Host::Ipv4(ip) => ip.is_loopback() || ip.is_unspecified(),
            url::Host::Ipv6(ip) => ip.is_loopback() || ip.is_unspecified(),
        });
    match parsed {
        Err(e) => fail(
            name,
            format!("{:?} is not a URL: {e}", cfg.public_url),
            "set public_url (CMCP_DISCOVERY_PUBLIC_URL) to the address platforms reach the gateway at",
        ),
        Ok(_) if loopback && webhooks_expected => fail(
            name,
            format!(
                "{} is a loopback address: no platform can deliver to it",
                cfg.public_url
            ),
            "set public_url (CMCP_DISCOVERY_PUBLIC_URL) to the gateway's public https address",
        ),
        Ok(_) => pass(name, cfg.public_url.clone()),
    }
}

/// Leases expire by the database's clock as each process reads its own: a
/// process whose clock is off by more than a quarter of the lease takes
/// leases early or holds them late.
async fn clock(store: &Store, cfg: &Config) -> Check {
    let slack = cfg.sync.lease_ttl / 4;
    let before = chrono::Utc::now().timestamp_millis();
    let db = match store.database_now_ms().await {
        Ok(ms) => ms,
        Err(e) => return fail("clock", e.to_string(), "check the store"),
    };
    let after = chrono::Utc::now().timestamp_millis();
    let local = before + (after - before) / 2;
    let skew = Duration::from_millis((db - local).unsigned_abs());
    if skew <= slack {
        pass(
            "clock",
            format!("agrees with the database within {skew:?} (allowed {slack:?})"),
        )
    } else {
        fail(
            "clock",
            format!("differs from the database by {skew:?} (allowed {slack:?})"),
            "run time synchronisation (chrony, systemd-timesyncd) on this host and the database's",
        )
    }
}
