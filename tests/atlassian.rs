//! The Bitbucket Cloud and Jira Cloud harness: a simulator that answers
//! only the tests' Atlassian credentials, and a company connection to it
//! holding them.

use cmcp_domain::{ConnectionSpec, Platform, Token};
use cmcp_fixtures::{BitbucketSim, BitbucketSimConfig, JiraSim, JiraSimConfig};
use cmcp_registry::testing::TestDb;
use cmcp_worker::SyncContext;

use crate::{add_spec_connection, fast_http, init_tls, sync_context};

/// The Atlassian API token the simulators accept.
pub const ATLASSIAN_SECRET: &str = "atlassian_secret_token_42";
/// The account the token belongs to.
pub const ATLASSIAN_EMAIL: &str = "admin@acme.com";

/// The connection secret for [`ATLASSIAN_EMAIL`] and [`ATLASSIAN_SECRET`].
pub fn atlassian_token() -> Token {
    Token::new(format!("basic:{ATLASSIAN_EMAIL}:{ATLASSIAN_SECRET}"))
}

/// A connection spec for the simulated workspace.
pub fn bitbucket_spec(sim: &BitbucketSim) -> ConnectionSpec {
    ConnectionSpec {
        platform: Platform::Bitbucket,
        scope: sim.workspace(),
        base_url: sim.base_url(),
    }
}

/// A simulated Bitbucket Cloud workspace shaped by `cfg` (its credentials
/// replaced by the tests'), a company connection `id` to it, and a sync
/// context with fast retries.
pub async fn bitbucket(
    db: &TestDb,
    id: &str,
    cfg: BitbucketSimConfig,
) -> (BitbucketSim, SyncContext) {
    init_tls();
    let sim = BitbucketSim::start(BitbucketSimConfig {
        token: Some(ATLASSIAN_SECRET.into()),
        email: Some(ATLASSIAN_EMAIL.into()),
        ..cfg
    })
    .await
    .expect("bitbucket simulator");
    add_spec_connection(&db.store, id, bitbucket_spec(&sim), atlassian_token()).await;
    (sim, sync_context(&db.store, fast_http()))
}

/// A simulated Jira Cloud site shaped by `cfg` (its credentials replaced by
/// the tests'), a company connection `id` to it, and a sync context with
/// fast retries.
pub async fn jira(db: &TestDb, id: &str, cfg: JiraSimConfig) -> (JiraSim, SyncContext) {
    init_tls();
    let sim = JiraSim::start(JiraSimConfig {
        token: Some(ATLASSIAN_SECRET.into()),
        email: Some(ATLASSIAN_EMAIL.into()),
        ..cfg
    })
    .await
    .expect("jira simulator");
    let spec = ConnectionSpec {
        platform: Platform::Jira,
        scope: sim.site(),
        base_url: sim.base_url(),
    };
    add_spec_connection(&db.store, id, spec, atlassian_token()).await;
    (sim, sync_context(&db.store, fast_http()))
}
