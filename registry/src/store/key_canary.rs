//! The master-key canary: one value sealed with the master key the first
//! time a key is used on this store, opened again at every start.
//!
//! Why: a process given the wrong key (a fleet member without the shared
//! key, a restored database with a new key file) would otherwise start
//! normally and fail only when a sync opens a token, with the real cause
//! buried in a queue's last result. With the canary it refuses to start.
//! A store from before the canary is checked against a connection's sealed
//! token before the canary is written, so the first key to arrive does not
//! become "right" by default.

use super::connections::token_context;
use super::{Store, now_ms, on_pool};
use crate::cipher::Cipher;
use crate::error::{RegistryError, Result};

const CANARY_CONTEXT: &str = "cmcp-master-key-canary";
const CANARY_TEXT: &[u8] = b"cmcp-discovery master key canary v1";

impl Store {
    /// Whether no registry migration was ever applied: a new database.
    pub async fn is_new(&self) -> Result<bool> {
        let found: i64 = match self {
            Store::Sqlite(pool) => {
                sqlx::query_scalar(
                    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = $1",
                )
                .bind(super::MIGRATIONS_TABLE)
                .fetch_one(pool)
                .await?
            }
            Store::Postgres(pool) => {
                sqlx::query_scalar(
                    "SELECT count(*) FROM information_schema.tables \
                     WHERE table_schema = current_schema() AND table_name = $1",
                )
                .bind(super::MIGRATIONS_TABLE)
                .fetch_one(pool)
                .await?
            }
        };
        Ok(found == 0)
    }

    /// Proves `cipher` holds the key this store's secrets are sealed with,
    /// writing the canary on first use. [`RegistryError::WrongMasterKey`]
    /// when they do not open.
    pub async fn check_master_key(&self, cipher: &Cipher) -> Result<()> {
        if let Some(sealed) = self.key_canary().await? {
            return open_canary(cipher, &sealed);
        }
        let token: Option<(String, Vec<u8>)> = on_pool!(self, pool => {
            sqlx::query_as("SELECT id, token_sealed FROM connections ORDER BY id LIMIT 1")
                .fetch_optional(pool)
                .await?
        });
        if let Some((id, sealed)) = token {
            cipher
                .open(&sealed, &token_context(&id))
                .map_err(|_| RegistryError::WrongMasterKey)?;
        }
        let sealed = cipher.seal(CANARY_TEXT, CANARY_CONTEXT)?;
        on_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO master_key_canary (id, sealed, created_at) VALUES (1, $1, $2) \
                 ON CONFLICT (id) DO NOTHING",
            )
            .bind(&sealed)
            .bind(now_ms())
            .execute(pool)
            .await?;
        });
        // Another process may have written its canary first, with its key.
        let stored = self
            .key_canary()
            .await?
            .ok_or_else(|| RegistryError::Corrupt {
                what: "master key canary vanished after it was written".to_owned(),
            })?;
        open_canary(cipher, &stored)
    }

    async fn key_canary(&self) -> Result<Option<Vec<u8>>> {
        Ok(on_pool!(self, pool => {
            sqlx::query_scalar("SELECT sealed FROM master_key_canary WHERE id = 1")
                .fetch_optional(pool)
                .await?
        }))
    }
}

fn open_canary(cipher: &Cipher, sealed: &[u8]) -> Result<()> {
    match cipher.open(sealed, CANARY_CONTEXT) {
        Ok(text) if text == CANARY_TEXT => Ok(()),
        _ => Err(RegistryError::WrongMasterKey),
    }
}

#[cfg(test)]
mod tests {
    use cmcp_domain::{ConnectionSpec, Owner, Platform, Token};

    use super::*;
    use crate::NewConnection;
    use crate::testing::TestDb;

    async fn backends() -> Vec<TestDb> {
        let mut dbs = vec![TestDb::sqlite().await];
        dbs.extend(TestDb::postgres().await);
        dbs
    }

    fn key(n: u8) -> Cipher {
        Cipher::from_key_bytes(&[n; 32]).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_first_key_writes_the_canary_and_another_key_is_refused() {
        for db in backends().await {
            assert!(!db.store.is_new().await.unwrap(), "migrated");
            db.store.check_master_key(&key(1)).await.unwrap();
            db.store.check_master_key(&key(1)).await.unwrap();
            let err = db.store.check_master_key(&key(2)).await.unwrap_err();
            assert!(matches!(err, RegistryError::WrongMasterKey), "{err}");
            assert!(err.to_string().contains("wrong master key"), "{err}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_store_without_a_canary_is_checked_against_its_sealed_tokens() {
        for db in backends().await {
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
                .create_connection(&key(1), new, "test")
                .await
                .unwrap();
            let err = db.store.check_master_key(&key(2)).await.unwrap_err();
            assert!(matches!(err, RegistryError::WrongMasterKey), "{err}");
            db.store.check_master_key(&key(1)).await.unwrap();
            assert!(db.store.check_master_key(&key(2)).await.is_err());
        }
    }
}
