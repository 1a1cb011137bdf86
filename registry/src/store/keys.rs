//! Who may act: API keys (role admin, member or service; admins hold named
//! powers) and the admin screen's sessions; and the ADMIN's connection
//! switch. Only hashes of keys, session ids and CSRF tokens are stored: the
//! caller (`cmcp-admin`) makes the random secrets, shows a key once and
//! hashes before calling here. Every change is audited in its transaction.

use cmcp_domain::ConnectionStatus;
use serde::Serialize;

use super::audit::{NewAuditEntry, insert_audit};
use super::{Store, in_tx, now_ms, on_pool};
use crate::error::{RegistryError, Result};

cmcp_domain::string_enum! {
    /// What a key may do: admins decide, members and services read.
    pub enum Role: "role" {
        Admin = "admin",
        Member = "member",
        Service = "service",
    }
}

cmcp_domain::string_enum! {
    /// A named power an admin key holds.
    pub enum Power: "power" {
        /// Decide mapping proposals.
        Mappings = "mappings",
        /// Switch connections on and off.
        Connections = "connections",
    }
}

/// An admin key's powers, in the order they were given; stored and sent
/// comma-separated (`mappings,connections`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Powers(Vec<Power>);

impl Powers {
    pub fn new(powers: impl IntoIterator<Item = Power>) -> Powers {
        Powers(powers.into_iter().collect())
    }

    pub fn contains(&self, power: Power) -> bool {
        self.0.contains(&power)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = Power> + '_ {
        self.0.iter().copied()
    }
}

impl FromIterator<Power> for Powers {
    fn from_iter<I: IntoIterator<Item = Power>>(iter: I) -> Powers {
        Powers::new(iter)
    }
}

impl std::fmt::Display for Powers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.0.iter().map(|p| p.as_str()).collect();
        f.write_str(&names.join(","))
    }
}

impl std::str::FromStr for Powers {
    type Err = cmcp_domain::UnknownName;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        s.split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::parse)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map(Powers)
    }
}

impl TryFrom<String> for Powers {
    type Error = cmcp_domain::UnknownName;

    fn try_from(s: String) -> std::result::Result<Self, Self::Error> {
        s.parse()
    }
}

impl Serialize for Powers {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct ApiKeyRow {
    pub id: String,
    pub name: String,
    #[sqlx(try_from = "String")]
    pub role: Role,
    /// Named powers (admins only).
    #[sqlx(try_from = "String")]
    pub powers: Powers,
    pub created_at: i64,
    pub created_by: String,
    pub revoked_at: Option<i64>,
    /// The person a member key acts for; service keys name one per request
    /// (`X-CMCP-Person`).
    pub person: Option<String>,
}

impl ApiKeyRow {
    pub fn has_power(&self, power: Power) -> bool {
        self.role == Role::Admin && self.powers.contains(power)
    }
}

pub struct NewApiKey<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub key_hash: &'a str,
    pub role: Role,
    pub powers: &'a Powers,
    /// Member keys only: the person the key is bound to.
    pub person: Option<&'a str>,
}

/// A live session of the admin screen and the key behind it.
#[derive(Debug, Clone)]
pub struct SessionRow {
    pub key: ApiKeyRow,
    pub csrf_hash: String,
    pub expires_at: i64,
}

/// Live sessions one key may hold (browsers, devices); starting one more
/// ends the oldest.
pub const SESSIONS_PER_KEY: i64 = 20;

/// The columns of an [`ApiKeyRow`], as a literal so constant statements
/// can be built from it.
macro_rules! key_columns {
    () => {
        "id, name, role, powers, created_at, created_by, revoked_at, person"
    };
}

const KEY_COLUMNS: &str = key_columns!();

/// The live (not revoked) key with the hash `$1` (the pool and the SQLite
/// inline reader run the same text).
pub(super) const KEY_BY_HASH_SQL: &str = concat!(
    "SELECT ",
    key_columns!(),
    " FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL"
);

impl Store {
    pub async fn create_api_key(&self, key: &NewApiKey<'_>, actor: &str) -> Result<ApiKeyRow> {
        if key.role != Role::Admin && !key.powers.is_empty() {
            return Err(RegistryError::Invalid {
                what: "key: powers are for admin keys only".to_owned(),
            });
        }
        let person = key.person.map(str::trim).filter(|p| !p.is_empty());
        if person.is_some() && key.role != Role::Member {
            return Err(RegistryError::Invalid {
                what: "key: only member keys are bound to a person".to_owned(),
            });
        }
        let now = now_ms();
        let powers = key.powers.to_string();
        in_tx!(self, durable, tx => {
            sqlx::query(
                "INSERT INTO api_keys (id, name, key_hash, role, powers, created_at, created_by, person) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(key.id).bind(key.name).bind(key.key_hash).bind(key.role.as_str()).bind(&powers)
            .bind(now).bind(actor).bind(person)
            .execute(&mut *tx).await?;
            let entry = NewAuditEntry {
                actor: actor.to_owned(),
                action: "key.create".to_owned(),
                target: format!("key:{}", key.id),
                reason: None,
                before: None,
                after: Some(serde_json::json!({"name": key.name, "role": key.role, "powers": powers, "person": person})),
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
        in_tx!(self, durable, tx => {
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
        Ok(on_pool!(self, pool => {
            sqlx::query_as(KEY_BY_HASH_SQL).bind(key_hash).fetch_optional(pool).await?
        }))
    }

    /// Starts a session of `key_id`, ending expired ones, and the key's
    /// oldest past [`SESSIONS_PER_KEY`].
    pub async fn create_session(
        &self,
        id_hash: &str,
        key_id: &str,
        csrf_hash: &str,
        ttl_ms: i64,
    ) -> Result<()> {
        let now = now_ms();
        in_tx!(self, tx => {
            sqlx::query("DELETE FROM admin_sessions WHERE expires_at < $1").bind(now).execute(&mut *tx).await?;
            sqlx::query(
                "INSERT INTO admin_sessions (id_hash, key_id, csrf_hash, created_at, expires_at) VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(id_hash).bind(key_id).bind(csrf_hash).bind(now).bind(now.saturating_add(ttl_ms))
            .execute(&mut *tx).await?;
            // Past the cap, the key's oldest sessions end: a key signing in
            // in a loop cannot fill the table.
            sqlx::query(
                "DELETE FROM admin_sessions WHERE key_id = $1 AND id_hash NOT IN \
                 (SELECT id_hash FROM admin_sessions WHERE key_id = $1 \
                  ORDER BY created_at DESC, id_hash DESC LIMIT $2)",
            )
            .bind(key_id).bind(SESSIONS_PER_KEY)
            .execute(&mut *tx).await?;
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

    /// A sign-out. Durable before it returns (on SQLite, the WAL synced):
    /// a sign-out a crash of the machine undid would leave the session
    /// open for the rest of its life after the screen said it ended.
    pub async fn delete_session(&self, id_hash: &str) -> Result<()> {
        in_tx!(self, durable, tx => {
            sqlx::query("DELETE FROM admin_sessions WHERE id_hash = $1").bind(id_hash).execute(&mut *tx).await?;
        });
        Ok(())
    }

    /// The ADMIN's switch, audited with the reason.
    pub async fn set_connection_status(
        &self,
        id: &str,
        status: ConnectionStatus,
        actor: &str,
        reason: Option<&str>,
    ) -> Result<bool> {
        let before = self.get_connection(id).await?;
        if before.status == status {
            return Ok(false);
        }
        // Only its person unlinks, and an unlinked connection has no token
        // left to sync with.
        if before.status == ConnectionStatus::Unlinked || status == ConnectionStatus::Unlinked {
            return Err(RegistryError::Invalid {
                what: format!(
                    "connection {id:?}: unlinking is the person's own act (people unlink)"
                ),
            });
        }
        let now = now_ms();
        in_tx!(self, durable, tx => {
            sqlx::query("UPDATE connections SET status = $1, updated_at = $2 WHERE id = $3")
                .bind(status.as_str()).bind(now).bind(id).execute(&mut *tx).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn powers_keep_their_stored_text() {
        for text in [
            "",
            "mappings",
            "connections,mappings",
            "mappings,connections",
        ] {
            let powers: Powers = text.parse().unwrap();
            assert_eq!(powers.to_string(), text);
            assert_eq!(
                serde_json::to_string(&powers).unwrap(),
                format!("\"{text}\"")
            );
        }
        let e = "mappings,root".parse::<Powers>().unwrap_err();
        assert!(
            e.to_string().contains("known: mappings, connections"),
            "{e}"
        );
    }
}
