//! Connections: one credential reading one org / workspace / site / domain.
//! The token is sealed before it reaches SQL and is never part of a row type,
//! so no listing, log line or JSON answer can carry it.

use cmcp_domain::{ConnectionSpec, ConnectionStatus, Owner, Platform, RiskNotice, Token};
use serde::Serialize;

use super::audit::{NewAuditEntry, insert_audit};
use super::{Store, in_tx, now_ms, on_pool};
use crate::cipher::Cipher;
use crate::error::{RegistryError, Result};

pub struct NewConnection {
    pub id: String,
    pub spec: ConnectionSpec,
    pub owner: Owner,
    pub token: Token,
    pub settings: serde_json::Value,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConnectionRow {
    pub id: String,
    pub platform: Platform,
    pub scope: String,
    pub base_url: String,
    pub owner: Owner,
    pub status: ConnectionStatus,
    pub risks: Vec<RiskNotice>,
    pub settings: serde_json::Value,
    pub lease_owner: Option<String>,
    pub lease_until: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

#[derive(sqlx::FromRow)]
struct RawConnection {
    id: String,
    platform: String,
    scope: String,
    base_url: String,
    owner: String,
    status: String,
    risks: String,
    settings: String,
    lease_owner: Option<String>,
    lease_until: Option<i64>,
    created_at: i64,
    updated_at: i64,
}

impl TryFrom<RawConnection> for ConnectionRow {
    type Error = RegistryError;

    fn try_from(r: RawConnection) -> Result<Self> {
        let corrupt = |what: &str| RegistryError::Corrupt {
            what: format!("connection {}: {what}", r.id),
        };
        Ok(ConnectionRow {
            platform: r.platform.parse().map_err(|_| corrupt("platform"))?,
            status: r.status.parse().map_err(|_| corrupt("status"))?,
            risks: serde_json::from_str(&r.risks).map_err(|_| corrupt("risks"))?,
            settings: serde_json::from_str(&r.settings).map_err(|_| corrupt("settings"))?,
            owner: Owner::from_db(&r.owner),
            id: r.id,
            scope: r.scope,
            base_url: r.base_url,
            lease_owner: r.lease_owner,
            lease_until: r.lease_until,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

impl ConnectionRow {
    pub fn spec(&self) -> ConnectionSpec {
        ConnectionSpec {
            platform: self.platform,
            scope: self.scope.clone(),
            base_url: self.base_url.clone(),
        }
    }
}

const SELECT: &str = "SELECT id, platform, scope, base_url, owner, status, risks, settings, \
                      lease_owner, lease_until, created_at, updated_at FROM connections";

/// Associated data binding a sealed token to its connection row.
pub(super) fn token_context(id: &str) -> String {
    format!("cmcp-connection-token:{id}")
}

impl Store {
    /// Create a connection, sealing its token, and audit it in the same
    /// transaction.
    pub async fn create_connection(
        &self,
        cipher: &Cipher,
        new: NewConnection,
        actor: &str,
    ) -> Result<ConnectionRow> {
        validate_connection_id(&new.id)?;
        if new.token.is_empty() {
            return Err(RegistryError::Invalid {
                what: "token: it is empty".to_owned(),
            });
        }
        let sealed = cipher.seal_token(&new.token, &token_context(&new.id))?;
        let now = now_ms();
        let settings = new.settings.to_string();
        let after = serde_json::json!({
            "platform": new.spec.platform, "scope": new.spec.scope,
            "base_url": new.spec.base_url, "owner": new.owner.as_db(),
        });
        in_tx!(self, durable, tx => {
            let exists: Option<(String,)> = sqlx::query_as("SELECT id FROM connections WHERE id = $1")
                .bind(&new.id)
                .fetch_optional(&mut *tx)
                .await?;
            if exists.is_some() {
                return Err(RegistryError::AlreadyExists { what: format!("connection {}", new.id) });
            }
            sqlx::query(
                "INSERT INTO connections (id, platform, scope, base_url, owner, token_sealed, settings, \
                 status, risks, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, 'enabled', '[]', $8, $8)",
            )
            .bind(&new.id)
            .bind(new.spec.platform.as_str())
            .bind(&new.spec.scope)
            .bind(&new.spec.base_url)
            .bind(new.owner.as_db())
            .bind(&sealed)
            .bind(&settings)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            let entry = NewAuditEntry {
                actor: actor.to_owned(),
                action: "connection.create".to_owned(),
                target: format!("connection:{}", new.id),
                reason: None,
                before: None,
                after: Some(after),
            };
            insert_audit!(&mut *tx, &entry, now)?;
        });
        self.get_connection(&new.id).await
    }

    pub async fn get_connection(&self, id: &str) -> Result<ConnectionRow> {
        let sql = format!("{SELECT} WHERE id = $1");
        let raw: Option<RawConnection> = on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(id).fetch_optional(pool).await?
        });
        raw.ok_or_else(|| RegistryError::not_found(format!("connection {id:?}")))?
            .try_into()
    }

    pub async fn list_connections(&self) -> Result<Vec<ConnectionRow>> {
        let sql = format!("{SELECT} ORDER BY id");
        let raws: Vec<RawConnection> = on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).fetch_all(pool).await?
        });
        raws.into_iter().map(TryInto::try_into).collect()
    }

    /// The connection's token, opened with the master key. Callers hand it to
    /// a connector and drop it; it is never stored elsewhere.
    pub async fn connection_token(&self, cipher: &Cipher, id: &str) -> Result<Token> {
        let sealed: Option<(Vec<u8>, String)> = on_pool!(self, pool => {
            sqlx::query_as("SELECT token_sealed, status FROM connections WHERE id = $1").bind(id).fetch_optional(pool).await?
        });
        let (sealed, status) =
            sealed.ok_or_else(|| RegistryError::not_found(format!("connection {id:?}")))?;
        if status == ConnectionStatus::Unlinked.as_str() {
            return Err(RegistryError::Invalid {
                what: format!("connection {id:?} was unlinked: it has no token"),
            });
        }
        cipher.open_token(&sealed, &token_context(id))
    }

    /// Record what the last reading of the credential revealed (write scopes
    /// and the like). Only writes when the notices changed.
    pub async fn set_connection_risks(&self, id: &str, risks: &[RiskNotice]) -> Result<bool> {
        let json = serde_json::to_string(risks).map_err(|e| RegistryError::Corrupt {
            what: e.to_string(),
        })?;
        let now = now_ms();
        let n = on_pool!(self, pool => {
            sqlx::query("UPDATE connections SET risks = $1, updated_at = $2 WHERE id = $3 AND risks <> $1")
                .bind(&json).bind(now).bind(id).execute(pool).await?.rows_affected()
        });
        Ok(n > 0)
    }

    /// Take the connection's sync lease for `ttl_ms`, unless a live lease is
    /// held — by anyone, `holder` included: the lease is not re-entrant, so
    /// two jobs of one worker are kept apart exactly like two workers of a
    /// fleet. A killed holder's lease simply lapses.
    ///
    /// A refusal names the holder as it was read after the attempt. A lease
    /// released (or lapsed) between the two is free, not held by no one:
    /// the attempt is made again, so a free lease is never reported held.
    pub async fn try_acquire_lease(
        &self,
        id: &str,
        holder: &str,
        ttl_ms: i64,
    ) -> Result<LeaseAttempt> {
        let mut freed: (Option<String>, i64) = (None, 0);
        for _ in 0..LEASE_ATTEMPTS {
            let now = now_ms();
            let n = on_pool!(self, pool => {
                sqlx::query(
                    "UPDATE connections SET lease_owner = $1, lease_until = $2 \
                     WHERE id = $3 AND (lease_owner IS NULL OR lease_until IS NULL OR lease_until < $4)",
                )
                .bind(holder).bind(now.saturating_add(ttl_ms)).bind(id).bind(now)
                .execute(pool).await?.rows_affected()
            });
            if n == 1 {
                return Ok(LeaseAttempt::Acquired);
            }
            let row = self.get_connection(id).await?;
            match (row.lease_owner, row.lease_until) {
                (Some(holder), Some(until_ms)) if until_ms >= now => {
                    return Ok(LeaseAttempt::HeldBy { holder, until_ms });
                }
                // Freed since the attempt: try again.
                (holder, until_ms) => freed = (holder, until_ms.unwrap_or(now)),
            }
        }
        // Every round lost: another holder took the lease and gave it up
        // again between each attempt and its reread, a lease changing hands
        // faster than it can be read. The caller waits and tries later.
        let (holder, until_ms) = freed;
        Ok(LeaseAttempt::HeldBy {
            holder: holder.unwrap_or_default(),
            until_ms,
        })
    }

    /// Extend a lease this holder still owns; false when it was lost.
    pub async fn renew_lease(&self, id: &str, holder: &str, ttl_ms: i64) -> Result<bool> {
        let now = now_ms();
        let n = on_pool!(self, pool => {
            sqlx::query("UPDATE connections SET lease_until = $1 WHERE id = $2 AND lease_owner = $3")
                .bind(now.saturating_add(ttl_ms)).bind(id).bind(holder).execute(pool).await?.rows_affected()
        });
        Ok(n == 1)
    }

    pub async fn release_lease(&self, id: &str, holder: &str) -> Result<()> {
        on_pool!(self, pool => {
            sqlx::query("UPDATE connections SET lease_owner = NULL, lease_until = NULL WHERE id = $1 AND lease_owner = $2")
                .bind(id).bind(holder).execute(pool).await?;
        });
        Ok(())
    }
}

/// How many times [`Store::try_acquire_lease`] tries a lease it finds free
/// after losing it.
const LEASE_ATTEMPTS: u32 = 8;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseAttempt {
    Acquired,
    HeldBy { holder: String, until_ms: i64 },
}

/// Connection ids appear in URLs and CLI arguments: keep them plain.
fn validate_connection_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && !id.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(RegistryError::Invalid {
            what: format!("connection id {id:?}: use 1-64 of a-z, 0-9, '-', '_'"),
        })
    }
}

impl Store {
    /// Point a connection at another API base and token (a moved GHES
    /// host, a rotated token), and replace its settings when given. The token is sealed again; both changes are
    /// audited, the token itself never.
    pub async fn update_connection_endpoint(
        &self,
        cipher: &Cipher,
        id: &str,
        base_url: &str,
        token: &Token,
        settings: Option<&serde_json::Value>,
        actor: &str,
    ) -> Result<ConnectionRow> {
        let before = self.get_connection(id).await?;
        let settings = settings.map(|s| s.to_string());
        let sealed = cipher.seal_token(token, &token_context(id))?;
        let now = now_ms();
        let entry = NewAuditEntry {
            actor: actor.to_owned(),
            action: "connection.update-endpoint".to_owned(),
            target: format!("connection:{id}"),
            reason: None,
            before: Some(serde_json::json!({ "base_url": before.base_url })),
            after: Some(serde_json::json!({ "base_url": base_url, "token": "replaced" })),
        };
        in_tx!(self, durable, tx => {
            sqlx::query(
                "UPDATE connections SET base_url = $1, token_sealed = $2, updated_at = $3, \
                 settings = COALESCE($5, settings) WHERE id = $4",
            )
                .bind(base_url).bind(&sealed).bind(now).bind(id).bind(&settings)
                .execute(&mut *tx).await?;
            insert_audit!(&mut *tx, &entry, now)?;
        });
        self.get_connection(id).await
    }
}

#[cfg(test)]
mod tests {
    use cmcp_domain::{ConnectionSpec, Owner, Platform, RunFigures, RunOutcome, Token};

    use super::*;
    use crate::testing::TestDb;

    async fn backends() -> Vec<TestDb> {
        let mut dbs = vec![TestDb::sqlite().await];
        dbs.extend(TestDb::postgres().await);
        dbs
    }

    async fn connection(db: &TestDb) {
        let cipher = Cipher::from_key_bytes(&[1u8; 32]).unwrap();
        let new = NewConnection {
            id: "c".to_owned(),
            spec: ConnectionSpec {
                platform: Platform::Github,
                scope: "acme".to_owned(),
                base_url: "https://api.github.com".to_owned(),
            },
            owner: Owner::Company,
            token: Token::new("ghp_x"),
            settings: serde_json::json!({}),
        };
        db.store
            .create_connection(&cipher, new, "test")
            .await
            .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_holder_cannot_take_its_own_live_lease_again() {
        for db in backends().await {
            connection(&db).await;
            assert_eq!(
                db.store.try_acquire_lease("c", "w1", 60_000).await.unwrap(),
                LeaseAttempt::Acquired
            );
            assert!(
                matches!(
                    db.store.try_acquire_lease("c", "w1", 60_000).await.unwrap(),
                    LeaseAttempt::HeldBy { holder, .. } if holder == "w1"
                ),
                "a second job of the same worker must defer"
            );
            db.store.release_lease("c", "w1").await.unwrap();
            assert_eq!(
                db.store.try_acquire_lease("c", "w1", 60_000).await.unwrap(),
                LeaseAttempt::Acquired
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn only_the_lease_holder_closes_running_runs_as_abandoned() {
        for db in backends().await {
            connection(&db).await;
            assert_eq!(
                db.store.try_acquire_lease("c", "w1", 60_000).await.unwrap(),
                LeaseAttempt::Acquired
            );
            let live = db
                .store
                .start_run("c", cmcp_domain::RunTrigger::Cli, "w1")
                .await
                .unwrap();
            assert_eq!(db.store.abandon_running_runs("c", "w2").await.unwrap(), 0);
            assert_eq!(
                db.store.get_run(&live).await.unwrap().outcome,
                RunOutcome::Running
            );
            db.store
                .finish_run(&live, RunOutcome::Complete, &RunFigures::default(), None)
                .await
                .unwrap();
            // w1 dies mid-run: its lease lapses, and w2 closes the run.
            let dead = db
                .store
                .start_run("c", cmcp_domain::RunTrigger::Cli, "w1")
                .await
                .unwrap();
            assert!(db.store.renew_lease("c", "w1", -1).await.unwrap());
            assert_eq!(
                db.store.try_acquire_lease("c", "w2", 60_000).await.unwrap(),
                LeaseAttempt::Acquired
            );
            assert_eq!(db.store.abandon_running_runs("c", "w2").await.unwrap(), 1);
            let run = db.store.get_run(&dead).await.unwrap();
            assert_eq!(run.outcome, RunOutcome::Failed);
            assert!(run.error.unwrap().contains("abandoned"));
            assert_eq!(
                db.store.get_run(&live).await.unwrap().outcome,
                RunOutcome::Complete
            );
        }
    }
}
