//! Sessions of the `/admin` screen (and of a person's `/me` page, in its
//! own [`Realm`]) and their CSRF defence.
//!
//! Signing in with an admin key makes a random session id, sent only as an
//! HttpOnly, SameSite=Strict cookie; only its hash is stored. The CSRF token
//! is derived from the session id (SHA-256 under a fixed label), so only the
//! holder of the cookie can know it; its hash is stored too. Every POST must
//! carry the token in a hidden field, and a POST whose Origin (or
//! Sec-Fetch-Site) says it came from another site is refused before that.

use axum::http::HeaderMap;
use axum::http::header::{COOKIE, HOST, ORIGIN};
use cmcp_registry::{Role, SessionRow, Store};
use sha2::{Digest, Sha256};

use crate::auth::{generate_secret, hash_secret};
use crate::error::AdminError;

pub const COOKIE_NAME: &str = "cmcp_admin";

/// Where a session lives: its cookie, the path the cookie is sent to, and
/// the one role whose keys may hold it. A member's session on `/me` is
/// never an admin session, even when its id is replayed in the admin
/// cookie.
#[derive(Debug, Clone, Copy)]
pub struct Realm {
    pub cookie: &'static str,
    pub path: &'static str,
    pub role: Role,
}

/// The ADMIN's screen.
pub const ADMIN: Realm = Realm {
    cookie: COOKIE_NAME,
    path: "/admin",
    role: Role::Admin,
};

/// A person's page, signed in with a member key.
pub const ME: Realm = Realm {
    cookie: "cmcp_me",
    path: "/me",
    role: Role::Member,
};
/// Eight hours: a working day.
pub const SESSION_TTL_MS: i64 = 8 * 60 * 60 * 1000;

pub fn csrf_for(session_id: &str) -> String {
    hex::encode(Sha256::digest(
        format!("cmcp-admin-csrf:{session_id}").as_bytes(),
    ))
}

/// A signed-in session: the key behind it and the CSRF token for forms.
pub struct Session {
    pub row: SessionRow,
    pub id_hash: String,
    pub csrf: String,
}

/// Start a session for a key; returns the session id for the cookie.
pub async fn start(store: &Store, key_id: &str) -> Result<String, AdminError> {
    let sid = generate_secret("s_");
    store
        .create_session(
            &hash_secret(&sid),
            key_id,
            &hash_secret(&csrf_for(&sid)),
            SESSION_TTL_MS,
        )
        .await?;
    Ok(sid)
}

/// `secure`: the public URL is https, so the browser must never send the
/// cookie over plain http.
pub fn set_cookie(sid: &str, secure: bool) -> String {
    ADMIN.set_cookie(sid, secure)
}

pub fn clear_cookie(secure: bool) -> String {
    ADMIN.clear_cookie(secure)
}

impl Realm {
    pub fn set_cookie(&self, sid: &str, secure: bool) -> String {
        format!(
            "{}={sid}; Path={}; HttpOnly; SameSite=Strict; Max-Age={}{}",
            self.cookie,
            self.path,
            SESSION_TTL_MS / 1000,
            if secure { "; Secure" } else { "" }
        )
    }

    pub fn clear_cookie(&self, secure: bool) -> String {
        format!(
            "{}=; Path={}; HttpOnly; SameSite=Strict; Max-Age=0{}",
            self.cookie,
            self.path,
            if secure { "; Secure" } else { "" }
        )
    }

    /// The live session of this realm named by the request's cookie: one
    /// whose key has the realm's role.
    pub async fn current(
        &self,
        store: &Store,
        headers: &HeaderMap,
    ) -> Result<Option<Session>, AdminError> {
        let Some(sid) = cookie_value(headers, self.cookie) else {
            return Ok(None);
        };
        let id_hash = hash_secret(&sid);
        Ok(store
            .session_by_hash(&id_hash)
            .await?
            .filter(|row| row.key.role == self.role)
            .map(|row| Session {
                row,
                id_hash,
                csrf: csrf_for(&sid),
            }))
    }
}

fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, value)| value.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// The live admin session named by the request's cookie, if any.
pub async fn current(store: &Store, headers: &HeaderMap) -> Result<Option<Session>, AdminError> {
    ADMIN.current(store, headers).await
}

/// Refuse a POST that a browser marks as coming from another site.
pub fn check_origin(headers: &HeaderMap) -> Result<(), AdminError> {
    let refuse = || {
        Err(AdminError::Forbidden(
            "cross-site request refused".to_owned(),
        ))
    };
    if headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == "cross-site")
    {
        return refuse();
    }
    let Some(origin) = headers.get(ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or("");
    let host = headers
        .get(HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let origin_host = origin.split_once("://").map(|(_, rest)| rest).unwrap_or("");
    if host.is_empty() || origin_host != host {
        return refuse();
    }
    Ok(())
}

/// The form's token must be the session's: compared by hash.
pub fn check_csrf(session: &Session, token: Option<&str>) -> Result<(), AdminError> {
    match token {
        Some(t) if hash_secret(t) == session.row.csrf_hash => Ok(()),
        _ => Err(AdminError::Forbidden(
            "missing or wrong CSRF token".to_owned(),
        )),
    }
}
