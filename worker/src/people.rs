//! Linking a person's GitHub: check the token, create the person's
//! connection, queue its first sync.
//!
//! Why in the worker: it is the crate that knows both the connectors (the
//! token is checked against GitHub before anything is stored) and the
//! store with its queue tables. The CLI and the API call this one function,
//! so both link alike.

use cmcp_connectors::HttpConfig;
use cmcp_connectors::github::user::{self, LISTING_SETTING, TokenCheck, USER_LISTING};
use cmcp_domain::{ConnectionSpec, Owner, Platform, RiskNotice, RunTrigger, Token};
use cmcp_registry::{Cipher, ConnectionRow, NewConnection, QueuedJob, Store};
use serde::Serialize;

use crate::jobs::sync_connection::{QUEUE, SyncConnection};
use crate::{Result, WorkerError};

/// GitHub's API unless another base is given (an Enterprise Server).
pub const DEFAULT_GITHUB_API: &str = "https://api.github.com";
/// Attempts of the first sync's job (it reschedules itself when incomplete).
const FIRST_SYNC_ATTEMPTS: i32 = 5;

/// A link to make.
pub struct LinkGithub {
    pub person: String,
    pub token: Token,
    pub base_url: String,
    /// Who asks (audited).
    pub actor: String,
}

/// A link made.
#[derive(Debug, Clone, Serialize)]
pub struct Linked {
    pub connection_id: String,
    pub person: String,
    /// The GitHub account `GET /user` named.
    pub login: String,
    pub github_id: u64,
    /// Shown to the person: the token can write.
    pub risks: Vec<RiskNotice>,
}

/// Whether a failed link is the caller's to fix (a token GitHub refuses,
/// a base URL that is no GitHub, an account already linked) rather than
/// the fleet's.
pub fn callers_mistake(e: &WorkerError) -> bool {
    use cmcp_connectors::ConnectorError as C;
    use cmcp_registry::RegistryError as R;
    match e {
        WorkerError::Connector(c) => matches!(
            c,
            C::Unauthorized { .. }
                | C::PermissionDenied { .. }
                | C::NotFound { .. }
                | C::InvalidConfig { .. }
                | C::Http { .. }
        ),
        WorkerError::Registry(r) => matches!(r, R::AlreadyExists { .. } | R::Invalid { .. }),
        _ => false,
    }
}

/// The id of `person`'s connection to GitHub account `login`: readable,
/// and within the store's 64 characters of `a-z0-9-_`.
pub fn connection_id(person: &str, login: &str) -> String {
    let clean = |s: &str| -> String {
        s.to_ascii_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect()
    };
    let mut id = format!("gh-{}-{}", clean(person), clean(login));
    id.truncate(64);
    id
}

/// Checks the token (`GET /user`), then creates the person's connection in
/// the `user` listing mode with the account's login as its scope, records
/// the token's risks, and queues its first sync.
pub async fn link_github(
    store: &Store,
    cipher: &Cipher,
    http: HttpConfig,
    link: LinkGithub,
) -> Result<Linked> {
    let TokenCheck { login, id, risks } =
        user::check_token(&link.base_url, &link.token, http).await?;
    let connection_id = connection_id(&link.person, &login);
    store
        .create_connection(
            cipher,
            NewConnection {
                id: connection_id.clone(),
                spec: ConnectionSpec {
                    platform: Platform::Github,
                    scope: login.clone(),
                    base_url: link.base_url.clone(),
                },
                owner: Owner::Person(link.person.clone()),
                token: link.token,
                settings: serde_json::json!({
                    LISTING_SETTING: USER_LISTING,
                    "github_login": login,
                    "github_id": id,
                }),
            },
            &link.actor,
        )
        .await?;
    store.set_connection_risks(&connection_id, &risks).await?;
    let job = SyncConnection::new(&connection_id, RunTrigger::Link);
    store
        .enqueue_job(&QueuedJob::json(QUEUE, &job, FIRST_SYNC_ATTEMPTS)?)
        .await?;
    tracing::info!(connection_id = %connection_id, risks = risks.len(), "personal github linked");
    Ok(Linked {
        connection_id,
        person: link.person,
        login,
        github_id: id,
        risks,
    })
}

/// After a complete sync of a person's connection, their suggestions
/// follow what it listed. A failure is logged and never fails the sync
/// (the next run retries); a company connection has no person to suggest
/// to.
pub(crate) async fn refresh_suggestions_after_sync(store: &Store, connection: &ConnectionRow) {
    let Owner::Person(person) = &connection.owner else {
        return;
    };
    if let Err(e) = cmcp_matching::refresh_suggestions(store, person).await {
        tracing::warn!(error = %e, "could not refresh the person's suggestions");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_ids_fit_the_store() {
        assert_eq!(connection_id("alice", "Alice-GH"), "gh-alice-alice-gh");
        assert_eq!(connection_id("a.b@c", "x"), "gh-a-b-c-x");
        assert!(connection_id(&"p".repeat(80), "x").len() <= 64);
    }
}
