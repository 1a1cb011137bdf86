//! Who may act: API keys (role admin, member or service; admins hold named
//! powers) and the admin screen's sessions; and the ADMIN's connection
//! switch. Only hashes of keys, session ids and CSRF tokens are stored: the
//! caller (`cmcp-admin`) makes the random secrets, shows a key once and
//! hashes before calling here. Every change is audited in its transaction.

use serde::Serialize;

use super::audit::{NewAuditEntry, insert_audit};
use super::{Store, in_tx, now_ms, on_pool};
use crate::error::{RegistryError, Result};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct ApiKeyRow {
    pub id: String,
    pub name: String,
    pub role: String,
    /// Comma-separated named powers (admins only): mappings, connections.
    pub powers: String,
    pub created_at: i64,
    pub created_by: String,
    pub revoked_at: Option<i64>,
}

impl ApiKeyRow {
    pub fn has_power(&self, power: &str) -> bool {
        self.role == "admin" && self.powers.split(',').any(|p| p.trim() == power)
    }
}

pub struct NewApiKey<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub key_hash: &'a str,
    pub role: &'a str,
    pub powers: &'a [String],
}

pub const ROLES: [&str; 3] = ["admin", "member", "service"];
pub const POWERS: [&str; 2] = ["mappings", "connections"];

/// A live session of the admin screen and the key behind it.
#[derive(Debug, Clone)]
pub struct SessionRow {
    pub key: ApiKeyRow,
    pub csrf_hash: String,
    pub expires_at: i64,
}

const KEY_COLUMNS: &str = "id, name, role, powers, created_at, created_by, revoked_at";

impl Store {
    pub async fn create_api_key(&self, key: &NewApiKey<'_>, actor: &str) -> Result<ApiKeyRow> {
        if !ROLES.contains(&key.role) {
            return Err(RegistryError::Invalid {
                what: format!("role {:?} (admin, member or service)", key.role),
            });
        }
        if let Some(p) = key.powers.iter().find(|p| !POWERS.contains(&p.as_str())) {
            return Err(RegistryError::Invalid {
                what: format!("power {p:?} (mappings or connections)"),
            });
        }
        if key.role != "admin" && !key.powers.is_empty() {
            return Err(RegistryError::Invalid {
                what: "key: powers are for admin keys only".to_owned(),
            });
        }
        let now = now_ms();
        let powers = key.powers.join(",");
        in_tx!(self, tx => {
            sqlx::query(
                "INSERT INTO api_keys (id, name, key_hash, role, powers, created_at, created_by) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(key.id).bind(key.name).bind(key.key_hash).bind(key.role).bind(&powers)
            .bind(now).bind(actor)
            .execute(&mut *tx).await?;
            let entry = NewAuditEntry {
                actor: actor.to_owned(),
                action: "key.create".to_owned(),
                target: format!("key:{}", key.id),
                reason: None,
                before: None,
                after: Some(serde_json::json!({"name": key.name, "role": key.role, "powers": powers})),
            };
            insert_audit!(&mut *tx, &entry, now)?;
        });
        self.get_api_key(key.id).await
    }

    pub async fn get_api_key(&self, id: &str) -> Result<ApiKeyRow> {
        let sql = format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE id = $1");
        let row: Option<ApiKeyRow> = on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(id).fetch_optional(pool).await?
        });
        row.ok_or_else(|| RegistryError::not_found(format!("key {id}")))
    }

    pub async fn list_api_keys(&self) -> Result<Vec<ApiKeyRow>> {
        let sql = format!("SELECT {KEY_COLUMNS} FROM api_keys ORDER BY created_at, id");
        Ok(on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).fetch_all(pool).await?
        }))
    }

    /// Revoke a key and end its sessions. `false` when already revoked.
    pub async fn revoke_api_key(&self, id: &str, actor: &str) -> Result<bool> {
        let before = self.get_api_key(id).await?;
        if before.revoked_at.is_some() {
            return Ok(false);
        }
        let now = now_ms();
        in_tx!(self, tx => {
            sqlx::query("UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL")
                .bind(now).bind(id).execute(&mut *tx).await?;
            sqlx::query("DELETE FROM admin_sessions WHERE key_id = $1").bind(id).execute(&mut *tx).await?;
            let entry = NewAuditEntry {
                actor: actor.to_owned(),
                action: "key.revoke".to_owned(),
                target: format!("key:{id}"),
                reason: None,
                before: Some(serde_json::json!({"revoked": false})),
                after: Some(serde_json::json!({"revoked": true})),
            };
            insert_audit!(&mut *tx, &entry, now)?;
        });
        Ok(true)
    }

    /// The live (not revoked) key with this hash.
    pub async fn key_by_hash(&self, key_hash: &str) -> Result<Option<ApiKeyRow>> {
        let sql = format!(
            "SELECT {KEY_COLUMNS} FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL"
        );
        Ok(on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(key_hash).fetch_optional(pool).await?
        }))
    }

    pub async fn create_session(
        &self,
        id_hash: &str,
        key_id: &str,
        csrf_hash: &str,
        ttl_ms: i64,
    ) -> Result<()> {
        let now = now_ms();
        on_pool!(self, pool => {
            sqlx::query("DELETE FROM admin_sessions WHERE expires_at < $1").bind(now).execute(pool).await?;
            sqlx::query(
                "INSERT INTO admin_sessions (id_hash, key_id, csrf_hash, created_at, expires_at) VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(id_hash).bind(key_id).bind(csrf_hash).bind(now).bind(now + ttl_ms)
            .execute(pool).await?;
        });
        Ok(())
    }

    /// The unexpired session with this hash whose key is still live.
    pub async fn session_by_hash(&self, id_hash: &str) -> Result<Option<SessionRow>> {
        let now = now_ms();
        let row: Option<(String, String, i64)> = on_pool!(self, pool => {
            sqlx::query_as("SELECT key_id, csrf_hash, expires_at FROM admin_sessions WHERE id_hash = $1 AND expires_at > $2")
                .bind(id_hash).bind(now).fetch_optional(pool).await?
        });
        let Some((key_id, csrf_hash, expires_at)) = row else {
            return Ok(None);
        };
        let key = self.get_api_key(&key_id).await?;
        if key.revoked_at.is_some() {
            return Ok(None);
        }
        Ok(Some(SessionRow {
            key,
            csrf_hash,
            expires_at,
        }))
    }

    pub async fn delete_session(&self, id_hash: &str) -> Result<()> {
        on_pool!(self, pool => {
            sqlx::query("DELETE FROM admin_sessions WHERE id_hash = $1").bind(id_hash).execute(pool).await?;
        });
        Ok(())
    }

    /// The ADMIN's switch: `enabled` or `disabled`, audited with the reason.
    pub async fn set_connection_status(
        &self,
        id: &str,
        status: &str,
        actor: &str,
        reason: Option<&str>,
    ) -> Result<bool> {
        if !matches!(status, "enabled" | "disabled") {
            return Err(RegistryError::Invalid {
                what: format!("connection status {status:?} (enabled or disabled)"),
            });
        }
        let before = self.get_connection(id).await?;
        if before.status == status {
            return Ok(false);
        }
        let now = now_ms();
        in_tx!(self, tx => {
            sqlx::query("UPDATE connections SET status = $1, updated_at = $2 WHERE id = $3")
                .bind(status).bind(now).bind(id).execute(&mut *tx).await?;
            let entry = NewAuditEntry {
                actor: actor.to_owned(),
                action: "connection.status".to_owned(),
                target: format!("connection:{id}"),
                reason: reason.map(str::to_owned),
                before: Some(serde_json::json!({"status": before.status})),
                after: Some(serde_json::json!({"status": status})),
            };
            insert_audit!(&mut *tx, &entry, now)?;
        });
        Ok(true)
    }
}
