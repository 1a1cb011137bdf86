//! The GitHub connector against the simulated GitHub.

mod concurrency;
mod faults;
mod listing;
mod read;
mod scripted;
mod token;

use cmcp_connectors::{GithubConnector, HttpConfig};
use cmcp_domain::{
    Alias, AliasKind, SpaceAddress, SpaceKind, SpaceRecord, SpaceState, Token, Visibility,
};
use cmcp_fixtures::{GithubSim, GithubSimConfig, RepoSnapshot};

pub const TOKEN: &str = "ghp_simulated_token_0123456789";

/// A simulator that requires [`TOKEN`].
pub async fn sim(cfg: GithubSimConfig) -> GithubSim {
    GithubSim::start(GithubSimConfig {
        token: Some(TOKEN.into()),
        ..cfg
    })
    .await
    .expect("start simulated GitHub")
}

/// A connector configured as an operator would: for a simulated GHES whose
/// web host differs from its API host, with that web host.
pub fn connector(sim: &GithubSim, cfg: HttpConfig) -> GithubConnector {
    GithubConnector::new(&sim.base_url(), &sim.org(), Token::new(TOKEN), cfg)
        .and_then(|c| c.with_web_host(Some(&sim.web_host())))
        .expect("build connector")
}

/// The record a repository must map to, built from the simulator's own view
/// (not from the connector's code).
pub fn expected(s: &RepoSnapshot, web_host: &str) -> SpaceRecord {
    let alias = |kind, raw: &str| Alias::new(kind, raw).expect("alias");
    SpaceRecord {
        address: SpaceAddress::new(SpaceKind::GithubRepo, web_host, &s.id.to_string()).unwrap(),
        display_name: s.full_name.clone(),
        container: Some(
            SpaceAddress::new(SpaceKind::GithubOrg, web_host, &s.owner_id.to_string()).unwrap(),
        ),
        aliases: vec![
            alias(AliasKind::Name, &s.name),
            alias(AliasKind::FullName, &s.full_name),
            alias(AliasKind::WebUrl, &s.html_url),
            alias(AliasKind::GitRemote, &s.clone_url),
            alias(AliasKind::HostId, &s.node_id),
        ],
        state: SpaceState {
            archived: s.archived,
            visibility: Visibility::parse(&s.visibility),
            trashed: false,
        },
    }
}

/// Compares two records field by field, aliases in canonical order.
pub fn assert_same(got: &SpaceRecord, want: &SpaceRecord) {
    assert_eq!(got.address, want.address);
    assert_eq!(got.display_name, want.display_name, "{}", want.address);
    assert_eq!(got.container, want.container, "{}", want.address);
    assert_eq!(got.state, want.state, "{}", want.address);
    assert_eq!(
        got.canonical_aliases(),
        want.canonical_aliases(),
        "{}",
        want.address
    );
}

/// Asserts that `records` (repositories only) are exactly the simulator's
/// repositories, each mapped as expected.
pub fn assert_exactly_the_sims_repos(records: &[&SpaceRecord], sim: &GithubSim, web_host: &str) {
    let mut repos: Vec<&SpaceRecord> = records
        .iter()
        .copied()
        .filter(|r| r.address.kind() == SpaceKind::GithubRepo)
        .collect();
    repos.sort_by(|a, b| a.address.cmp(&b.address));
    let mut want: Vec<SpaceRecord> = sim.repos().iter().map(|s| expected(s, web_host)).collect();
    want.sort_by(|a, b| a.address.cmp(&b.address));
    assert_eq!(repos.len(), want.len(), "repository count");
    for (g, w) in repos.iter().zip(&want) {
        assert_same(g, w);
    }
}
