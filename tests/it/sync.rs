use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use cmcp_domain::{AliasKind, RunOutcome, SpaceStatus};
use cmcp_fixtures::{Faults, GithubSimConfig};
use cmcp_registry::testing::TestDb;
use cmcp_registry::{LeaseAttempt, Store};
use cmcp_tests::{
    CONNECTION, Harness, assert_database_has_no_token, assert_registry_matches, fast_http,
    repo_address,
};
use cmcp_worker::{
    Queue, QueueConfig, SyncConnection, SyncOutcome, WorkerOptions, WorkerState, run_sync,
    run_workers,
};

async fn sync_once(h: &Harness) -> (RunOutcome, cmcp_domain::RunFigures, Option<String>) {
    match run_sync(&h.ctx, CONNECTION, cmcp_domain::RunTrigger::Test)
        .await
        .expect("sync")
    {
        SyncOutcome::Deferred { holder, .. } => panic!("deferred by {holder}"),
        done => (
            done.run_outcome().expect("a run"),
            done.figures().cloned().unwrap_or_default(),
            done.error().map(str::to_owned),
        ),
    }
}

fn org(repos: usize) -> GithubSimConfig {
    GithubSimConfig {
        repos,
        ..GithubSimConfig::default()
    }
}

pub async fn full_sync_of_1000_repos_gives_exactly_1000_spaces(db: TestDb) {
    let h = Harness::start(db, org(1000), fast_http()).await;
    let (outcome, figures, error) = sync_once(&h).await;
    assert_eq!(outcome, RunOutcome::Complete, "{error:?}");
    assert_eq!(figures.pages, 10);
    assert_eq!(figures.created, 1001, "1000 repos and their org");
    assert_registry_matches(h.store(), &h.sim).await;
    assert_eq!(
        h.store()
            .count_spaces(Some(CONNECTION), None)
            .await
            .unwrap(),
        1001
    );
    // The run's figures are recorded.
    let run = h.store().last_run(CONNECTION).await.unwrap().unwrap();
    assert_eq!(run.outcome, RunOutcome::Complete);
    assert_eq!(run.figures.items_seen, 1001);
    assert!(run.figures.requests >= 11);
    assert!(run.finished_at.is_some());
}

pub async fn rename_upstream_keeps_space_id_and_old_alias_resolves(db: TestDb) {
    let h = Harness::start(db, org(30), fast_http()).await;
    assert_eq!(sync_once(&h).await.0, RunOutcome::Complete);
    let before = h.sim.repos()[4].clone();
    h.sim.rename_repo(before.id, "billing-service");
    let (outcome, figures, _) = sync_once(&h).await;
    assert_eq!(outcome, RunOutcome::Complete);
    assert_eq!(figures.renamed, 1);
    assert_eq!(figures.created, 0);
    assert_registry_matches(h.store(), &h.sim).await;
    let address = repo_address(before.id);
    let new = h
        .store()
        .resolve("git@127.0.0.1:acme/billing-service.git")
        .await
        .unwrap();
    assert_eq!(new.len(), 1);
    assert_eq!(new[0].space.address, address);
    assert!(!new[0].retired);
    for old_spelling in [
        before.ssh_url.as_str(),
        before.clone_url.as_str(),
        before.html_url.as_str(),
        before.full_name.as_str(),
    ] {
        let old = h.store().resolve(old_spelling).await.unwrap();
        assert_eq!(old.len(), 1, "{old_spelling}");
        assert_eq!(old[0].space.address, address, "{old_spelling}");
        assert!(
            old[0].retired,
            "{old_spelling} must say the alias is retired"
        );
    }
    assert_eq!(
        h.store()
            .count_spaces(Some(CONNECTION), None)
            .await
            .unwrap(),
        31,
        "no second space"
    );
}

pub async fn failing_page_makes_a_partial_run_that_marks_nothing_missing(db: TestDb) {
    let mut http = fast_http();
    http.per_page = 10;
    http.max_attempts = 3;
    let h = Harness::start(db, org(50), http).await;
    assert_eq!(sync_once(&h).await.0, RunOutcome::Complete);
    // Upstream loses a repo, and page 3 keeps failing.
    let gone = h.sim.repos()[45].clone();
    h.sim.delete_repo(gone.id);
    h.sim.set_faults(Faults {
        failing_pages: BTreeSet::from([3]),
        ..Faults::default()
    });
    let (outcome, figures, error) = sync_once(&h).await;
    assert_eq!(outcome, RunOutcome::Partial);
    assert!(
        error.unwrap_or_default().contains("page 3"),
        "the failure names the page"
    );
    assert_eq!(figures.missing, 0);
    assert_eq!(
        h.store()
            .count_spaces(Some(CONNECTION), Some(SpaceStatus::Missing))
            .await
            .unwrap(),
        0,
        "a partial listing marks nothing missing"
    );
    let space = h
        .store()
        .get_space(&repo_address(gone.id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(space.status, SpaceStatus::Active);
    // The page recovers: the next run completes and the deleted repo is missing, not gone.
    h.sim.set_faults(Faults::default());
    let (outcome, figures, _) = sync_once(&h).await;
    assert_eq!(outcome, RunOutcome::Complete);
    assert_eq!(figures.missing, 1);
    assert_eq!(
        h.store()
            .get_space(&repo_address(gone.id))
            .await
            .unwrap()
            .unwrap()
            .status,
        SpaceStatus::Missing
    );
    assert_registry_matches(h.store(), &h.sim).await;
}

pub async fn ten_percent_faults_still_end_with_the_exact_registry(db: TestDb) {
    let mut http = fast_http();
    http.per_page = 20;
    let faults = Faults {
        server_error: 0.04,
        rate_limited_429: 0.02,
        drop_connection: 0.02,
        truncated_body: 0.01,
        secondary_403: 0.01,
        retry_after_secs: 1,
        ..Faults::default()
    };
    let h = Harness::start(
        db,
        GithubSimConfig {
            repos: 1000,
            faults,
            seed: 7,
            ..GithubSimConfig::default()
        },
        http,
    )
    .await;
    let (outcome, figures, error) = sync_once(&h).await;
    assert_eq!(outcome, RunOutcome::Complete, "{error:?}");
    assert!(h.sim.stats().faults_injected > 0, "faults were injected");
    assert!(figures.retries > 0, "and retried");
    assert_registry_matches(h.store(), &h.sim).await;
    // Changes upstream under the same faults still converge exactly.
    let repos = h.sim.repos();
    h.sim.rename_repo(repos[10].id, "renamed-under-faults");
    h.sim.set_archived(repos[20].id, true);
    h.sim.create_repo("brand-new");
    let (outcome, _, error) = sync_once(&h).await;
    assert_eq!(outcome, RunOutcome::Complete, "{error:?}");
    assert_registry_matches(h.store(), &h.sim).await;
}

pub async fn complete_listing_marks_deleted_and_transferred_repos_missing(db: TestDb) {
    // 2 of 25 spaces go: within the breaker's 10 %.
    let h = Harness::start(db, org(24), fast_http()).await;
    assert_eq!(sync_once(&h).await.0, RunOutcome::Complete);
    let repos = h.sim.repos();
    h.sim.delete_repo(repos[0].id);
    h.sim.transfer_repo(repos[1].id, "someone-else", 777);
    let (outcome, figures, _) = sync_once(&h).await;
    assert_eq!(outcome, RunOutcome::Complete);
    assert_eq!(figures.missing, 2);
    for r in &repos[..2] {
        let s = h
            .store()
            .get_space(&repo_address(r.id))
            .await
            .unwrap()
            .expect("kept, not deleted");
        assert_eq!(s.status, SpaceStatus::Missing);
        assert!(
            !h.store()
                .alias_history(&repo_address(r.id))
                .await
                .unwrap()
                .is_empty()
        );
    }
    assert_registry_matches(h.store(), &h.sim).await;
}

pub async fn sync_through_the_queue_and_a_worker(db: TestDb) {
    cmcp_worker::queue::setup(&db.store)
        .await
        .expect("queue tables");
    let h = Harness::start(db, org(120), fast_http()).await;
    let qcfg = QueueConfig {
        poll_interval: Duration::from_millis(100),
        ..QueueConfig::default()
    };
    let queue = Queue::new(h.store(), &qcfg);
    let opts = WorkerOptions::unique("it");
    let mut ctx = h.ctx.clone();
    ctx.holder = opts.name.clone();
    let state = Arc::new(WorkerState {
        ctx,
        queue: queue.clone(),
        queue_config: qcfg,
        schedule: None,
    });
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let worker = tokio::spawn(run_workers(state, opts, async move {
        let _ = stopped.await;
    }));
    queue
        .push(
            SyncConnection::new(CONNECTION, cmcp_domain::RunTrigger::Test),
            None,
            None,
        )
        .await
        .unwrap();
    let run = wait_for_complete_run(h.store(), Duration::from_secs(60)).await;
    assert_eq!(run.figures.created, 121);
    assert_registry_matches(h.store(), &h.sim).await;
    let _ = stop.send(());
    worker.await.unwrap().unwrap();
}

async fn wait_for_complete_run(store: &Store, limit: Duration) -> cmcp_registry::SyncRunRow {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(run) = store
            .list_runs(Some(CONNECTION), 10)
            .await
            .unwrap()
            .into_iter()
            .find(|r| r.outcome == RunOutcome::Complete)
        {
            return run;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no complete run within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn token_never_reaches_the_database(db: TestDb) {
    let h = Harness::start(
        db,
        GithubSimConfig {
            repos: 150,
            faults: Faults {
                server_error: 0.1,
                ..Faults::default()
            },
            ..GithubSimConfig::default()
        },
        fast_http(),
    )
    .await;
    sync_once(&h).await;
    assert_database_has_no_token(h.store(), &h.db.url).await;
}

pub async fn second_holder_defers_while_a_sync_runs(db: TestDb) {
    let h = Harness::start(db, org(5), fast_http()).await;
    assert_eq!(
        h.store()
            .try_acquire_lease(CONNECTION, "another-worker", 30_000)
            .await
            .unwrap(),
        LeaseAttempt::Acquired
    );
    match run_sync(&h.ctx, CONNECTION, cmcp_domain::RunTrigger::Test)
        .await
        .unwrap()
    {
        SyncOutcome::Deferred { holder, .. } => assert_eq!(holder, "another-worker"),
        other => panic!("expected a deferral, got {other:?}"),
    }
    assert!(
        h.store().last_run(CONNECTION).await.unwrap().is_none(),
        "nothing ran"
    );
    h.store()
        .release_lease(CONNECTION, "another-worker")
        .await
        .unwrap();
    assert_eq!(sync_once(&h).await.0, RunOutcome::Complete);
}

#[tokio::test]
async fn alias_kinds_cover_the_repo() {
    // Guard for the assertion helper itself: a repo has five alias kinds
    // (two remote spellings normalise to one).
    let r = cmcp_fixtures::RepoSnapshot {
        id: 1,
        node_id: "R_x".into(),
        name: "n".into(),
        full_name: "o/n".into(),
        owner_login: "o".into(),
        owner_id: 2,
        private: false,
        archived: false,
        visibility: "public".into(),
        html_url: "https://github.com/o/n".into(),
        clone_url: "https://github.com/o/n.git".into(),
        ssh_url: "git@github.com:o/n.git".into(),
        root_commit: None,
    };
    let kinds: BTreeSet<AliasKind> = cmcp_tests::expected_aliases(&r)
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(kinds.len(), 5);
    assert_eq!(cmcp_tests::expected_aliases(&r).len(), 5);
}

both_backends!(
    full_sync_of_1000_repos_gives_exactly_1000_spaces,
    rename_upstream_keeps_space_id_and_old_alias_resolves,
    failing_page_makes_a_partial_run_that_marks_nothing_missing,
    ten_percent_faults_still_end_with_the_exact_registry,
    complete_listing_marks_deleted_and_transferred_repos_missing,
    sync_through_the_queue_and_a_worker,
    token_never_reaches_the_database,
    second_holder_defers_while_a_sync_runs,
);
