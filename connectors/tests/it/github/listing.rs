//! Complete listings: size, mapping, GHES prefix, streaming order.

use cmcp_connectors::HttpConfig;
use cmcp_domain::{AliasKind, SpaceKind};
use cmcp_fixtures::GithubSimConfig;

use super::{assert_exactly_the_sims_repos, connector, sim};
use crate::support::{fast_cfg, list};

#[tokio::test]
async fn thousand_repo_org_is_listed_completely_with_exact_aliases() {
    let sim = sim(GithubSimConfig {
        repos: 1000,
        ..GithubSimConfig::default()
    })
    .await;
    let listed = list(&connector(&sim, fast_cfg())).await;
    let report = listed.result.as_ref().expect("listing");
    assert!(report.complete, "{:?}", report.failures);
    assert!(report.failures.is_empty());
    assert!(report.risks.is_empty(), "no X-OAuth-Scopes, no risk");

    // The org first, alone; then ten pages of a hundred.
    let org = &listed.batches[0];
    assert_eq!(org.len(), 1);
    assert_eq!(
        org[0].address.to_string(),
        format!("space:github-org:{}/{}", sim.web_host(), sim.org_id())
    );
    assert_eq!(org[0].display_name, sim.org());
    assert!(org[0].container.is_none());
    assert!(
        org[0]
            .aliases
            .iter()
            .any(|a| a.kind == AliasKind::Name && a.value == sim.org().to_lowercase())
    );
    assert_eq!(listed.batches.len(), 11);
    assert!(listed.batches[1..].iter().all(|b| b.len() == 100));
    assert!(
        listed.batches[1..]
            .iter()
            .flatten()
            .all(|r| r.container.as_ref() == Some(&org[0].address))
    );

    assert_exactly_the_sims_repos(&listed.records(), &sim, &sim.web_host());

    let f = &report.figures;
    assert_eq!(f.pages, 10);
    assert_eq!(f.requests, 11, "one org read and ten pages");
    assert_eq!(f.retries, 0);
    assert_eq!(f.rate_limit_waits, 0);
    assert_eq!(sim.stats().requests, 11);
}

#[tokio::test]
async fn ghes_base_url_with_api_v3_prefix_and_web_host() {
    let sim = sim(GithubSimConfig {
        repos: 150,
        path_prefix: "/api/v3".into(),
        web_host: Some("ghe.example.com".into()),
        ..GithubSimConfig::default()
    })
    .await;
    assert!(sim.base_url().ends_with("/api/v3"));
    for base in [sim.base_url(), format!("{}/", sim.base_url())] {
        let c = cmcp_connectors::GithubConnector::new(
            &base,
            &sim.org(),
            cmcp_domain::Token::new(super::TOKEN),
            fast_cfg(),
        )
        .and_then(|c| c.with_web_host(Some("ghe.example.com")))
        .unwrap();
        let listed = list(&c).await;
        let report = listed.result.as_ref().expect("listing");
        assert!(report.complete, "{:?}", report.failures);
        assert_eq!(report.figures.pages, 2);
        assert_eq!(
            listed.batches[0][0].address.to_string(),
            format!("space:github-org:ghe.example.com/{}", sim.org_id())
        );
        assert_exactly_the_sims_repos(&listed.records(), &sim, "ghe.example.com");
    }
}

#[tokio::test]
async fn small_pages_are_all_read_from_the_last_link() {
    let sim = sim(GithubSimConfig {
        repos: 95,
        ..GithubSimConfig::default()
    })
    .await;
    let cfg = HttpConfig {
        per_page: 10,
        ..fast_cfg()
    };
    let listed = list(&connector(&sim, cfg)).await;
    let report = listed.result.as_ref().unwrap();
    assert!(report.complete);
    assert_eq!(report.figures.pages, 10);
    // Pages arrive in any order: one org batch, nine full pages, one of 5.
    let mut sizes: Vec<usize> = listed.batches.iter().map(Vec::len).collect();
    sizes.sort_unstable();
    assert_eq!(sizes, [1, 5, 10, 10, 10, 10, 10, 10, 10, 10, 10]);
    assert_exactly_the_sims_repos(&listed.records(), &sim, &sim.web_host());
}

#[tokio::test]
async fn empty_org_sends_only_the_org() {
    let sim = sim(GithubSimConfig::default()).await;
    let listed = list(&connector(&sim, fast_cfg())).await;
    let report = listed.result.as_ref().unwrap();
    assert!(report.complete);
    assert_eq!(listed.records().len(), 1);
    assert_eq!(listed.records()[0].address.kind(), SpaceKind::GithubOrg);
}

#[tokio::test]
async fn archived_and_private_state_is_reported() {
    let sim = sim(GithubSimConfig {
        repos: 200,
        ..GithubSimConfig::default()
    })
    .await;
    let first = sim.repos()[0].id;
    sim.set_archived(first, true);
    sim.set_private(first, true);
    let listed = list(&connector(&sim, fast_cfg())).await;
    assert!(listed.result.as_ref().unwrap().complete);
    let rec = listed
        .records()
        .into_iter()
        .find(|r| r.address.stable_id() == first.to_string())
        .unwrap();
    assert!(rec.state.archived);
    assert_eq!(rec.state.visibility, Some(cmcp_domain::Visibility::Private));
    // Both flags are varied by the simulator's seed, and must all match.
    assert_exactly_the_sims_repos(&listed.records(), &sim, &sim.web_host());
}
