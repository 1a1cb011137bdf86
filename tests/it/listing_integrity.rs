//! A listing adds up before it is complete. Against simulators that serve
//! what an independent double served (a malformed stable id, an item twice,
//! an item deleted while an offset-paged listing is read, a reported total
//! that is not what is served), a run is partial and marks nothing missing;
//! with a total that lies, the listing is still read to the platform's end
//! marker, so every project is registered. On SQLite and PostgreSQL.
//!
//! An item served twice is found by the registry (the run's stamp on its
//! sighting), not by a set the connector keeps: the GitHub case shows it
//! across pages and within one.

use cmcp_connectors::HttpConfig;
use cmcp_domain::RunTrigger;
use cmcp_domain::{ConnectionSpec, Platform, SpaceAddress, SpaceKind, SpaceStatus, Token};
use cmcp_fixtures::{BitbucketSim, BitbucketSimConfig, GithubSimConfig, JiraSim, JiraSimConfig};
use cmcp_registry::testing::TestDb;
use cmcp_registry::{SpaceFilter, Store};
use cmcp_tests::{CONNECTION, Harness, add_spec_connection, fast_http, init_tls, sync_context};
use cmcp_worker::{SyncContext, SyncOutcome, run_sync};

both_backends!(
    github_repo_served_twice_is_partial_and_marks_nothing_missing,
    bitbucket_malformed_uuid_is_refused_and_marks_nothing_missing,
    bitbucket_repo_served_twice_is_partial_and_marks_nothing_missing,
    bitbucket_deletion_mid_listing_is_partial_and_marks_nothing_missing,
    jira_malformed_project_id_is_refused_and_marks_nothing_missing,
    jira_deletion_mid_listing_is_partial_and_marks_nothing_missing,
    jira_total_too_low_still_registers_every_project_and_marks_nothing_missing,
    jira_total_too_high_still_registers_every_project_and_marks_nothing_missing,
);

const BB: &str = "bitbucket-acme";
pub(crate) const JIRA: &str = "jira-acme";
const SECRET: &str = "atlassian_secret_token_42";
const EMAIL: &str = "admin@acme.com";

/// Small pages, so a listing of a few dozen items has several.
fn small_pages() -> HttpConfig {
    HttpConfig {
        per_page: 10,
        ..fast_http()
    }
}

async fn bitbucket(db: &TestDb, repos: usize) -> (BitbucketSim, SyncContext) {
    init_tls();
    let sim = BitbucketSim::start(BitbucketSimConfig {
        repos,
        projects: 2,
        token: Some(SECRET.into()),
        email: Some(EMAIL.into()),
        ..Default::default()
    })
    .await
    .expect("sim");
    let spec = ConnectionSpec {
        platform: Platform::Bitbucket,
        scope: sim.workspace(),
        base_url: sim.base_url(),
    };
    let token = Token::new(format!("basic:{EMAIL}:{SECRET}"));
    add_spec_connection(&db.store, BB, spec, token).await;
    (sim, sync_context(&db.store, small_pages()))
}

pub(crate) async fn jira(db: &TestDb, projects: usize, http: HttpConfig) -> (JiraSim, SyncContext) {
    init_tls();
    let sim = JiraSim::start(JiraSimConfig {
        projects,
        token: Some(SECRET.into()),
        email: Some(EMAIL.into()),
        ..Default::default()
    })
    .await
    .expect("sim");
    let spec = ConnectionSpec {
        platform: Platform::Jira,
        scope: sim.site(),
        base_url: sim.base_url(),
    };
    let token = Token::new(format!("basic:{EMAIL}:{SECRET}"));
    add_spec_connection(&db.store, JIRA, spec, token).await;
    (sim, sync_context(&db.store, http))
}

async fn complete(ctx: &SyncContext, id: &str) {
    let outcome = run_sync(ctx, id, RunTrigger::Test).await.expect("sync");
    assert!(
        matches!(outcome, SyncOutcome::Complete { .. }),
        "expected a complete run: {outcome:?}"
    );
}

/// Runs a sync that must end partial, marking nothing missing; returns why.
pub(crate) async fn partial(ctx: &SyncContext, id: &str) -> String {
    match run_sync(ctx, id, RunTrigger::Test).await.expect("sync") {
        SyncOutcome::Partial { figures, why, .. } => {
            assert_eq!(figures.missing, 0, "a partial run marks nothing missing");
            why
        }
        other => panic!("expected a partial run: {other:?}"),
    }
}

async fn with_status(store: &Store, status: SpaceStatus) -> Vec<SpaceAddress> {
    store
        .list_spaces(&SpaceFilter {
            status: Some(status),
            ..Default::default()
        })
        .await
        .expect("list")
        .into_iter()
        .map(|s| s.address)
        .collect()
}

async fn status(store: &Store, address: &SpaceAddress) -> Option<SpaceStatus> {
    store
        .get_space(address)
        .await
        .expect("get")
        .map(|s| s.status)
}

fn bb_repo(sim: &BitbucketSim, uuid: &str) -> SpaceAddress {
    let ws = sim.workspace_uuid();
    SpaceAddress::new(SpaceKind::BitbucketRepo, &ws, uuid).unwrap()
}

fn jira_project(sim: &JiraSim, id: &str) -> SpaceAddress {
    SpaceAddress::new(SpaceKind::JiraProject, &sim.cloud_id(), id).unwrap()
}

// ---- GitHub ----

async fn github_repo_served_twice_is_partial_and_marks_nothing_missing(db: TestDb) {
    let config = GithubSimConfig {
        repos: 25,
        ..GithubSimConfig::default()
    };
    let h = Harness::start(db, config, small_pages()).await;
    let (sim, ctx) = (&h.sim, &h.ctx);
    complete(ctx, CONNECTION).await;
    let repos = sim.repos();
    // Pages of 10: the 10th repository ends page 1 and comes again at the
    // top of page 2 (pages read concurrently), the 15th twice within page
    // 2; the 25th is gone, which a complete run would mark missing.
    sim.serve_repo_twice(repos[9].id);
    sim.serve_repo_twice(repos[14].id);
    sim.delete_repo(repos[24].id);
    let why = partial(ctx, CONNECTION).await;
    assert!(why.contains("2 spaces were listed twice"), "{why}");
    assert!(
        with_status(h.store(), SpaceStatus::Missing)
            .await
            .is_empty(),
        "a listing that repeats itself is no evidence of anything gone"
    );
}

// ---- Bitbucket ----

async fn bitbucket_malformed_uuid_is_refused_and_marks_nothing_missing(db: TestDb) {
    let (sim, ctx) = bitbucket(&db, 25).await;
    complete(&ctx, BB).await;
    let victim = sim.repos()[7].clone();
    sim.set_repo_uuid_text(&victim.uuid, "not-a-uuid");
    let why = partial(&ctx, BB).await;
    assert!(
        why.contains("not-a-uuid") && why.contains("uuid"),
        "the error names the id and what is wrong with it: {why}"
    );
    assert_eq!(
        status(&db.store, &bb_repo(&sim, &victim.uuid)).await,
        Some(SpaceStatus::Active),
        "the real repository is not displaced"
    );
    assert!(
        with_status(&db.store, SpaceStatus::Missing)
            .await
            .is_empty()
    );
    assert!(
        with_status(&db.store, SpaceStatus::Active)
            .await
            .iter()
            .all(|a| !a.stable_id().contains("not-a-uuid")),
        "the malformed id became no space"
    );
}

async fn bitbucket_repo_served_twice_is_partial_and_marks_nothing_missing(db: TestDb) {
    let (sim, ctx) = bitbucket(&db, 25).await;
    complete(&ctx, BB).await;
    // An offset shift seen from the other side: one repository served twice
    // while another is not served at all.
    let repos = sim.repos();
    sim.serve_repo_twice(&repos[9].uuid);
    sim.delete_repo(&repos[20].uuid);
    let why = partial(&ctx, BB).await;
    assert!(why.contains("listed twice"), "{why}");
    assert_eq!(
        status(&db.store, &bb_repo(&sim, &repos[20].uuid)).await,
        Some(SpaceStatus::Active),
        "an unseen repository is not marked missing on a listing that does not add up"
    );
    assert!(
        with_status(&db.store, SpaceStatus::Missing)
            .await
            .is_empty()
    );
}

async fn bitbucket_deletion_mid_listing_is_partial_and_marks_nothing_missing(db: TestDb) {
    let (sim, ctx) = bitbucket(&db, 25).await;
    complete(&ctx, BB).await;
    let repos = sim.repos();
    // Pages of 10: repository 1 goes after page 1, so page 2 starts one
    // later and repository 11 is never served.
    sim.delete_repo_after_page(1, &repos[0].uuid);
    let why = partial(&ctx, BB).await;
    assert!(why.contains("moved from"), "{why}");
    for r in [&repos[0], &repos[10]] {
        assert_eq!(
            status(&db.store, &bb_repo(&sim, &r.uuid)).await,
            Some(SpaceStatus::Active),
            "{}: nothing is marked missing on a shifted listing",
            r.full_name
        );
    }
    // The next listing adds up: only the deleted repository is missing.
    complete(&ctx, BB).await;
    assert_eq!(
        with_status(&db.store, SpaceStatus::Missing).await,
        vec![bb_repo(&sim, &repos[0].uuid)]
    );
}

// ---- Jira ----

async fn jira_malformed_project_id_is_refused_and_marks_nothing_missing(db: TestDb) {
    let (sim, ctx) = jira(&db, 30, fast_http()).await;
    complete(&ctx, JIRA).await;
    let victim = sim.projects()[12].clone();
    sim.set_project_id_text(&victim.id, "PROJ-12");
    let why = partial(&ctx, JIRA).await;
    assert!(why.contains("PROJ-12"), "{why}");
    assert_eq!(
        status(&db.store, &jira_project(&sim, &victim.id)).await,
        Some(SpaceStatus::Active)
    );
    assert!(
        with_status(&db.store, SpaceStatus::Missing)
            .await
            .is_empty()
    );
}

async fn jira_deletion_mid_listing_is_partial_and_marks_nothing_missing(db: TestDb) {
    // Jira caps pages at 50: 160 projects are four windows, read at once.
    let (sim, ctx) = jira(&db, 160, fast_http()).await;
    complete(&ctx, JIRA).await;
    let projects = sim.projects();
    sim.delete_project_after_page(1, &projects[3].id);
    partial(&ctx, JIRA).await;
    for p in [&projects[3], &projects[50]] {
        assert_eq!(
            status(&db.store, &jira_project(&sim, &p.id)).await,
            Some(SpaceStatus::Active),
            "{}",
            p.key
        );
    }
    assert!(
        with_status(&db.store, SpaceStatus::Missing)
            .await
            .is_empty()
    );
    complete(&ctx, JIRA).await;
    assert_eq!(
        with_status(&db.store, SpaceStatus::Missing).await,
        vec![jira_project(&sim, &projects[3].id)]
    );
}

/// Every project of the simulator is an active space, and none is missing.
pub(crate) async fn assert_every_project_registered(store: &Store, sim: &JiraSim) {
    let mut want: Vec<SpaceAddress> = sim
        .projects()
        .iter()
        .map(|p| jira_project(sim, &p.id))
        .collect();
    want.sort();
    let mut got = with_status(store, SpaceStatus::Active).await;
    got.sort();
    assert_eq!(got, want, "the exact registry");
    assert!(with_status(store, SpaceStatus::Missing).await.is_empty());
}

async fn jira_total_too_low_still_registers_every_project_and_marks_nothing_missing(db: TestDb) {
    let (sim, ctx) = jira(&db, 120, fast_http()).await;
    complete(&ctx, JIRA).await;
    // Jira says 90; it serves 120 and says isLast only at the end. Planning
    // by the total alone saw 90 and marked 30 live projects missing.
    sim.set_total_skew(-30);
    let why = partial(&ctx, JIRA).await;
    assert!(why.contains("reported 90 projects but served 120"), "{why}");
    assert_every_project_registered(&db.store, &sim).await;
    // A project created since is read too: the listing went past the total.
    let late = sim.create_project("LATE", "Created late");
    partial(&ctx, JIRA).await;
    assert_eq!(
        status(&db.store, &jira_project(&sim, &late)).await,
        Some(SpaceStatus::Active)
    );
    assert_every_project_registered(&db.store, &sim).await;
}

async fn jira_total_too_high_still_registers_every_project_and_marks_nothing_missing(db: TestDb) {
    let (sim, ctx) = jira(&db, 120, fast_http()).await;
    // Jira says 150; the last page of what it serves says isLast.
    sim.set_total_skew(30);
    let why = partial(&ctx, JIRA).await;
    assert!(
        why.contains("reported 150 projects but served 120"),
        "{why}"
    );
    assert_every_project_registered(&db.store, &sim).await;
    // Once the total is true again, the run completes.
    sim.set_total_skew(0);
    complete(&ctx, JIRA).await;
    assert_every_project_registered(&db.store, &sim).await;
}
