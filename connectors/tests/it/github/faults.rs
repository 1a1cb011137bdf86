//! Faults, partial listings and rate limits.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use cmcp_connectors::{ConnectorError, HttpConfig};
use cmcp_domain::SpaceKind;
use cmcp_fixtures::{Faults, GithubSimConfig, RateLimitConfig};

use super::{assert_exactly_the_sims_repos, connector, sim};
use crate::support::{fast_cfg, list};

#[tokio::test]
async fn ten_percent_mixed_faults_still_give_exactly_the_sims_repos() {
    let sim = sim(GithubSimConfig {
        repos: 1000,
        seed: 7,
        faults: Faults {
            server_error: 0.02,
            rate_limited_429: 0.02,
            secondary_403: 0.02,
            drop_connection: 0.02,
            truncated_body: 0.02,
            retry_after_secs: 1,
            ..Faults::default()
        },
        ..GithubSimConfig::default()
    })
    .await;
    // Small pages: more requests, so every kind of fault gets its chance.
    let cfg = HttpConfig {
        per_page: 20,
        ..fast_cfg()
    };
    let listed = list(&connector(&sim, cfg)).await;
    let report = listed.result.as_ref().expect("listing");
    assert!(report.complete, "{:?}", report.failures);
    assert_exactly_the_sims_repos(&listed.records(), &sim, &sim.web_host());

    let stats = sim.stats();
    assert!(stats.faults_injected > 0, "the seed must inject faults");
    let f = &report.figures;
    assert_eq!(f.pages, 50);
    // Every injected fault costs one retry (a dropped pooled connection may
    // add one more).
    assert!(f.retries >= stats.faults_injected, "{f:?} vs {stats:?}");
    assert_eq!(f.requests, 51 + f.retries);
    // Injected 429 / secondary 403 carry retry-after: waited out, and the
    // pause also holds back the pages fetched alongside.
    assert!(
        f.rate_limit_waits >= stats.rate_limited,
        "{f:?} vs {stats:?}"
    );
}

#[tokio::test]
async fn failing_page_makes_the_listing_partial_and_says_why() {
    let sim = sim(GithubSimConfig {
        repos: 50,
        faults: Faults {
            failing_pages: BTreeSet::from([3]),
            ..Faults::default()
        },
        ..GithubSimConfig::default()
    })
    .await;
    let cfg = HttpConfig {
        per_page: 10,
        max_attempts: 3,
        ..fast_cfg()
    };
    let listed = list(&connector(&sim, cfg)).await;
    let report = listed
        .result
        .as_ref()
        .expect("a partial listing is not an error");
    assert!(!report.complete);
    assert_eq!(report.failures.len(), 1, "{:?}", report.failures);
    let failure = &report.failures[0];
    assert!(failure.starts_with("page 3: "), "{failure}");
    assert!(
        failure.contains("HTTP 500: Internal Server Error after"),
        "{failure}"
    );
    assert!(failure.ends_with("after 3 attempts"), "{failure}");
    // Every other page (1, 2, 4, 5) was read and sent, and stays sent.
    let repos = listed
        .records()
        .iter()
        .filter(|r| r.address.kind() == SpaceKind::GithubRepo)
        .count();
    assert_eq!(repos, 40);
    assert_eq!(report.figures.pages, 4);
    assert_eq!(report.figures.retries, 2);
}

#[tokio::test]
async fn rate_budget_running_out_mid_listing_waits_for_the_reset() {
    let sim = sim(GithubSimConfig {
        repos: 100,
        rate_limit: Some(RateLimitConfig {
            limit: 6,
            window: Duration::from_secs(1),
        }),
        ..GithubSimConfig::default()
    })
    .await;
    let cfg = HttpConfig {
        per_page: 10,
        ..fast_cfg()
    };
    let started = Instant::now();
    let listed = list(&connector(&sim, cfg)).await;
    let report = listed.result.as_ref().expect("listing");
    assert!(report.complete, "{:?}", report.failures);
    assert_exactly_the_sims_repos(&listed.records(), &sim, &sim.web_host());
    let stats = sim.stats();
    assert_eq!(stats.over_budget, 0, "no request may hit an empty budget");
    // 11 requests, at most 5 per window (one kept in reserve): 2+ waits.
    assert!(report.figures.rate_limit_waits >= 2, "{:?}", report.figures);
    assert_eq!(report.figures.requests, 11);
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[tokio::test]
async fn a_reset_too_far_away_becomes_rate_limited() {
    let sim = sim(GithubSimConfig {
        repos: 100,
        rate_limit: Some(RateLimitConfig {
            limit: 3,
            window: Duration::from_secs(3600),
        }),
        ..GithubSimConfig::default()
    })
    .await;
    let cfg = HttpConfig {
        per_page: 10,
        max_rate_limit_wait: Duration::from_secs(5),
        ..fast_cfg()
    };
    let listed = list(&connector(&sim, cfg)).await;
    match &listed.result {
        Err(ConnectorError::RateLimited { retry_at, .. }) => {
            assert!(*retry_at > chrono::Utc::now() + chrono::TimeDelta::minutes(50));
        }
        other => panic!("expected RateLimited, got {other:?}"),
    }
    assert_eq!(sim.stats().over_budget, 0);
    // The org and the first page went out before the budget ran dry.
    assert_eq!(listed.records().len(), 11);
}

#[tokio::test]
async fn an_over_budget_answer_is_waited_out_until_the_reset() {
    // A budget already spent by someone else (another process on the same
    // token): the first answer is a 403 with remaining 0.
    let sim = sim(GithubSimConfig {
        repos: 5,
        rate_limit: Some(RateLimitConfig {
            limit: 1,
            window: Duration::from_secs(1),
        }),
        ..GithubSimConfig::default()
    })
    .await;
    let first = list(&connector(&sim, fast_cfg())).await;
    assert!(first.result.unwrap().complete);
    // A fresh connector knows nothing about the budget yet.
    let listed = list(&connector(&sim, fast_cfg())).await;
    let report = listed.result.expect("listing");
    assert!(report.complete, "{:?}", report.failures);
    assert!(report.figures.rate_limit_waits >= 1, "{:?}", report.figures);
}
