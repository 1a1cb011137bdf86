//! The audit log: who did what, when, why, with the before and after. It is
//! append-only at the database level (triggers refuse UPDATE and DELETE), so
//! not even a bug in this crate can rewrite history.

use serde::Serialize;

use super::{Store, in_tx, now_ms, on_pool};
use crate::error::{RegistryError, Result};

#[derive(Debug, Clone)]
pub struct NewAuditEntry {
    pub actor: String,
    pub action: String,
    pub target: String,
    pub reason: Option<String>,
    pub before: Option<serde_json::Value>,
    pub after: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AuditEntry {
    pub id: i64,
    pub at: i64,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub reason: Option<String>,
    pub before: Option<serde_json::Value>,
    pub after: Option<serde_json::Value>,
}

#[derive(sqlx::FromRow)]
struct RawAudit {
    id: i64,
    at: i64,
    actor: String,
    action: String,
    target: String,
    reason: Option<String>,
    before_json: Option<String>,
    after_json: Option<String>,
}

/// Insert one entry through any executor (a pool or an open transaction), so
/// a change and its audit entry commit together.
macro_rules! insert_audit {
    ($ex:expr, $entry:expr, $now:expr) => {{
        let entry: &$crate::store::audit::NewAuditEntry = $entry;
        sqlx::query(
            "INSERT INTO audit_log (at, actor, action, target, reason, before_json, after_json) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind($now)
        .bind(&entry.actor)
        .bind(&entry.action)
        .bind(&entry.target)
        .bind(&entry.reason)
        .bind(entry.before.as_ref().map(|v| v.to_string()))
        .bind(entry.after.as_ref().map(|v| v.to_string()))
        .execute($ex)
        .await
        .map(|_| ())
    }};
}
pub(crate) use insert_audit;

impl Store {
    pub async fn append_audit(&self, entry: &NewAuditEntry) -> Result<()> {
        let now = now_ms();
        in_tx!(self, durable, tx => { insert_audit!(&mut *tx, entry, now)? });
        Ok(())
    }

    /// Newest first.
    pub async fn list_audit(&self, limit: i64) -> Result<Vec<AuditEntry>> {
        let raws: Vec<RawAudit> = on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT id, at, actor, action, target, reason, before_json, after_json \
                 FROM audit_log ORDER BY id DESC LIMIT $1",
            )
            .bind(limit)
            .fetch_all(pool)
            .await?
        });
        raws.into_iter()
            .map(|r| {
                let parse = |s: Option<String>| -> Result<Option<serde_json::Value>> {
                    s.map(|s| serde_json::from_str(&s))
                        .transpose()
                        .map_err(|e| RegistryError::Corrupt {
                            what: format!("audit entry {}: {e}", r.id),
                        })
                };
                Ok(AuditEntry {
                    before: parse(r.before_json.clone())?,
                    after: parse(r.after_json.clone())?,
                    id: r.id,
                    at: r.at,
                    actor: r.actor,
                    action: r.action,
                    target: r.target,
                    reason: r.reason,
                })
            })
            .collect()
    }
}
