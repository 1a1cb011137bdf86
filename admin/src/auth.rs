//! API keys and who may do what. Keys are 256-bit random secrets shown once;
//! only their SHA-256 is stored, so a lookup by hash needs no constant-time
//! compare. Roles: admin, member, service; admins hold named powers
//! (mappings, connections). Every API route names what it needs.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use cmcp_registry::{ApiKeyRow, NewApiKey, Power, Powers, Role, Store};
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::AdminState;
use crate::error::AdminError;

/// A random secret: `prefix` + 64 hex characters.
pub fn generate_secret(prefix: &str) -> String {
    let mut buf = [0u8; 32];
    rand::rng().fill_bytes(&mut buf);
    format!("{prefix}{}", hex::encode(buf))
}

pub fn hash_secret(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.trim().as_bytes()))
}

/// Create a key; returns its row and the secret (to be shown once).
pub async fn create_key(
    store: &Store,
    name: &str,
    role: &str,
    powers: &[String],
    actor: &str,
) -> Result<(ApiKeyRow, String), AdminError> {
    create_key_for(store, name, role, powers, None, actor).await
}

/// Create a key, a member key bound to `person` when one is given.
pub async fn create_key_for(
    store: &Store,
    name: &str,
    role: &str,
    powers: &[String],
    person: Option<&str>,
    actor: &str,
) -> Result<(ApiKeyRow, String), AdminError> {
    let secret = generate_secret("cmcp_");
    let id = format!("key_{}", &generate_secret("")[..16]);
    let row = store
        .create_api_key(
            &NewApiKey {
                id: &id,
                name,
                key_hash: &hash_secret(&secret),
                role: role.parse()?,
                person,
                powers: &powers
                    .iter()
                    .map(|p| p.parse::<Power>())
                    .collect::<Result<Powers, _>>()?,
            },
            actor,
        )
        .await?;
    Ok((row, secret))
}

/// What a route needs.
#[derive(Debug, Clone, Copy)]
pub enum Need {
    /// An admin key, whatever its powers.
    Admin,
    /// An admin key with this named power.
    Power(Power),
}

/// The caller, authenticated by `Authorization: Bearer <key>`.
#[derive(Debug, Clone)]
pub struct Caller(pub ApiKeyRow);

impl Caller {
    pub fn require(&self, need: Need) -> Result<(), AdminError> {
        let ok = match need {
            Need::Admin => self.0.role == Role::Admin,
            Need::Power(p) => self.0.has_power(p),
        };
        if ok {
            Ok(())
        } else {
            Err(AdminError::Forbidden(match need {
                Need::Admin => "this needs an admin key".to_owned(),
                Need::Power(p) => format!("this needs an admin key with the {p} power"),
            }))
        }
    }

    /// The actor name written to the audit log.
    pub fn actor(&self) -> String {
        actor_of(&self.0)
    }
}

pub fn actor_of(key: &ApiKeyRow) -> String {
    format!("{} ({})", key.name, key.id)
}

impl FromRequestParts<AdminState> for Caller {
    type Rejection = AdminError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AdminState,
    ) -> Result<Self, Self::Rejection> {
        let header = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .ok_or(AdminError::Unauthorized)?;
        let secret = header
            .strip_prefix("Bearer ")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .ok_or(AdminError::Unauthorized)?;
        let hash = hash_secret(secret);
        let key = state
            .key_by_hash(&hash)
            .await?
            .ok_or(AdminError::Unauthorized)?;
        Ok(Caller(key))
    }
}
