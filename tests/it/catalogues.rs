//! End-to-end behaviours of the Bitbucket Cloud and Jira Cloud catalogues:
//! simulator → connector → sync engine → registry, on both backends.

use std::collections::{BTreeMap, BTreeSet};

use cmcp_domain::{AliasKind, RunOutcome, SpaceAddress, SpaceKind, SpaceStatus};
use cmcp_fixtures::{BitbucketSim, BitbucketSimConfig, Faults, JiraSim, JiraSimConfig};
use cmcp_registry::testing::TestDb;
use cmcp_registry::{SpaceFilter, Store};
use cmcp_worker::{SyncContext, SyncOutcome, run_sync};

const BB: &str = "bitbucket-acme";
const JIRA: &str = "jira-acme";

both_backends!(
    bitbucket_full_sync_gives_exact_spaces_aliases_and_containers,
    bitbucket_rename_and_key_change_keep_ids_and_old_aliases_resolve,
    bitbucket_ten_percent_faults_still_end_with_the_exact_registry,
    bitbucket_incomplete_listing_marks_nothing_missing,
    bitbucket_uuid_spellings_meet_one_space,
    jira_full_sync_gives_exact_spaces_and_every_key,
    jira_rename_and_key_change_keep_ids_and_old_key_resolves,
    jira_ten_percent_faults_still_end_with_the_exact_registry,
    jira_incomplete_listing_marks_nothing_missing,
);

async fn sync(ctx: &SyncContext, id: &str) -> RunOutcome {
    match run_sync(ctx, id, cmcp_domain::RunTrigger::Test)
        .await
        .expect("sync")
    {
        SyncOutcome::Deferred { holder, .. } => panic!("deferred by {holder}"),
        done => done.run_outcome().expect("a run"),
    }
}

async fn active(store: &Store, conn: &str) -> BTreeMap<SpaceAddress, cmcp_registry::SpaceRow> {
    store
        .list_spaces(&SpaceFilter {
            connection_id: Some(conn.to_owned()),
            status: Some(SpaceStatus::Active),
            ..Default::default()
        })
        .await
        .expect("list")
        .into_iter()
        .map(|s| (s.address.clone(), s))
        .collect()
}

async fn aliases(
    store: &Store,
    conn: &str,
) -> BTreeMap<SpaceAddress, BTreeSet<(AliasKind, String)>> {
    let mut out: BTreeMap<SpaceAddress, BTreeSet<(AliasKind, String)>> = BTreeMap::new();
    for a in store.active_aliases(conn).await.expect("aliases") {
        out.entry(a.space_address.clone())
            .or_default()
            .insert((a.kind, a.value));
    }
    out
}

fn set(pairs: &[(AliasKind, &str)]) -> BTreeSet<(AliasKind, String)> {
    pairs
        .iter()
        .map(|(k, v)| (*k, k.normalise(v).expect("normalises")))
        .collect()
}

// ---- Bitbucket ----

async fn bitbucket(db: &TestDb, repos: usize) -> (BitbucketSim, SyncContext) {
    let cfg = BitbucketSimConfig {
        repos,
        projects: 5,
        ..Default::default()
    };
    cmcp_tests::bitbucket(db, BB, cfg).await
}

/// The registry's active spaces of the connection are exactly the
/// workspace, its projects and its repositories, with their aliases and
/// containers.
async fn assert_bitbucket_matches(store: &Store, sim: &BitbucketSim) {
    let ws = sim.workspace_uuid();
    let spaces = active(store, BB).await;
    let aliases = aliases(store, BB).await;
    let ws_addr = SpaceAddress::new(SpaceKind::BitbucketWorkspace, &ws, &ws).unwrap();
    assert!(spaces.contains_key(&ws_addr), "workspace space");
    let projects = sim.projects();
    let repos = sim.repos();
    assert_eq!(spaces.len(), 1 + projects.len() + repos.len());
    for p in &projects {
        let a = SpaceAddress::new(SpaceKind::BitbucketProject, &ws, &p.uuid).unwrap();
        let s = spaces.get(&a).unwrap_or_else(|| panic!("{a} missing"));
        assert_eq!(s.container.as_ref(), Some(&ws_addr));
        assert_eq!(
            aliases.get(&a),
            Some(&set(&[
                (AliasKind::Key, &p.key),
                (AliasKind::Name, &p.name),
                (AliasKind::WebUrl, &p.html_url)
            ]))
        );
    }
    for r in &repos {
        let a = SpaceAddress::new(SpaceKind::BitbucketRepo, &ws, &r.uuid).unwrap();
        let s = spaces.get(&a).unwrap_or_else(|| panic!("{a} missing"));
        assert_eq!(s.display_name, r.full_name);
        assert_eq!(
            s.container,
            Some(SpaceAddress::new(SpaceKind::BitbucketProject, &ws, &r.project_uuid).unwrap())
        );
        assert_eq!(
            aliases.get(&a),
            Some(&set(&[
                (AliasKind::FullName, &r.full_name),
                (AliasKind::Slug, &r.slug),
                (AliasKind::Name, &r.name),
                (AliasKind::WebUrl, &r.html_url),
                (AliasKind::GitRemote, &r.https_url),
                (AliasKind::GitRemote, &r.ssh_url),
            ])),
            "{a}"
        );
    }
}

async fn bitbucket_full_sync_gives_exact_spaces_aliases_and_containers(db: TestDb) {
    let (sim, ctx) = bitbucket(&db, 230).await;
    assert_eq!(sync(&ctx, BB).await, RunOutcome::Complete);
    assert_bitbucket_matches(&db.store, &sim).await;
}

async fn bitbucket_rename_and_key_change_keep_ids_and_old_aliases_resolve(db: TestDb) {
    let (sim, ctx) = bitbucket(&db, 20).await;
    assert_eq!(sync(&ctx, BB).await, RunOutcome::Complete);
    let repo = sim.repos()[3].clone();
    let project = sim.projects()[1].clone();
    sim.rename_repo(&repo.uuid, "billing-service");
    sim.change_project_key(&project.uuid, "BILL");
    assert_eq!(sync(&ctx, BB).await, RunOutcome::Complete);
    assert_bitbucket_matches(&db.store, &sim).await;
    let ws = sim.workspace_uuid();
    let repo_addr = SpaceAddress::new(SpaceKind::BitbucketRepo, &ws, &repo.uuid).unwrap();
    let project_addr = SpaceAddress::new(SpaceKind::BitbucketProject, &ws, &project.uuid).unwrap();
    let new = db
        .store
        .resolve("git@bitbucket.org:acme/billing-service.git")
        .await
        .unwrap();
    assert_eq!(new[0].space.address, repo_addr);
    let old = db.store.resolve(&repo.ssh_url).await.unwrap();
    assert_eq!(old[0].space.address, repo_addr);
    assert!(old[0].retired);
    let old_key = db.store.resolve(&project.key).await.unwrap();
    assert!(
        old_key
            .iter()
            .any(|r| r.space.address == project_addr && r.retired)
    );
    let new_key = db.store.resolve("BILL").await.unwrap();
    assert!(
        new_key
            .iter()
            .any(|r| r.space.address == project_addr && !r.retired)
    );
}

async fn bitbucket_ten_percent_faults_still_end_with_the_exact_registry(db: TestDb) {
    let (sim, ctx) = bitbucket(&db, 300).await;
    sim.set_faults(Faults {
        server_error: 0.04,
        rate_limited_429: 0.03,
        drop_connection: 0.02,
        truncated_body: 0.01,
        ..Faults::default()
    });
    assert_eq!(sync(&ctx, BB).await, RunOutcome::Complete);
    assert_bitbucket_matches(&db.store, &sim).await;
}

async fn bitbucket_incomplete_listing_marks_nothing_missing(db: TestDb) {
    let (sim, ctx) = bitbucket(&db, 150).await;
    assert_eq!(sync(&ctx, BB).await, RunOutcome::Complete);
    let gone = sim.repos()[0].clone();
    sim.delete_repo(&gone.uuid);
    sim.set_faults(Faults {
        failing_pages: [2].into(),
        ..Faults::default()
    });
    assert_eq!(sync(&ctx, BB).await, RunOutcome::Partial);
    let a = SpaceAddress::new(SpaceKind::BitbucketRepo, &sim.workspace_uuid(), &gone.uuid).unwrap();
    assert_eq!(
        db.store.get_space(&a).await.unwrap().unwrap().status,
        SpaceStatus::Active
    );
    assert_eq!(
        db.store
            .count_spaces(Some(BB), Some(SpaceStatus::Missing))
            .await
            .unwrap(),
        0
    );
}

async fn bitbucket_uuid_spellings_meet_one_space(db: TestDb) {
    let (sim, ctx) = bitbucket(&db, 3).await;
    assert_eq!(sync(&ctx, BB).await, RunOutcome::Complete);
    let ws = sim.workspace_uuid();
    // The webhook sample's repository, as the gateway would see it.
    let hook: serde_json::Value = serde_json::from_str(include_str!(
        "../../fixtures/data/bitbucket/webhooks/webhook-repo-updated.json"
    ))
    .unwrap();
    let hook_uuid = hook["repository"]["uuid"].as_str().unwrap().to_owned();
    let bare = hook_uuid.trim_matches(['{', '}']).to_owned();
    let upper = format!("{{{}}}", bare.to_uppercase());
    let addresses: BTreeSet<SpaceAddress> = [&hook_uuid, &bare, &upper]
        .iter()
        .map(|u| SpaceAddress::new(SpaceKind::BitbucketRepo, &format!("{{{ws}}}"), u).unwrap())
        .collect();
    assert_eq!(addresses.len(), 1);
    // A braced uuid from the API lands on the registry's bare address.
    let repo = &sim.repos()[0];
    let from_api = SpaceAddress::new(
        SpaceKind::BitbucketRepo,
        &ws,
        &format!("{{{}}}", repo.uuid.to_uppercase()),
    )
    .unwrap();
    assert!(db.store.get_space(&from_api).await.unwrap().is_some());
}

// ---- Jira ----

async fn jira(db: &TestDb, projects: usize) -> (JiraSim, SyncContext) {
    let cfg = JiraSimConfig {
        projects,
        ..Default::default()
    };
    cmcp_tests::jira(db, JIRA, cfg).await
}

async fn assert_jira_matches(store: &Store, sim: &JiraSim) {
    let spaces = active(store, JIRA).await;
    let aliases = aliases(store, JIRA).await;
    let projects = sim.projects();
    assert_eq!(spaces.len(), projects.len());
    for p in &projects {
        let a = SpaceAddress::new(SpaceKind::JiraProject, &sim.cloud_id(), &p.id).unwrap();
        let s = spaces.get(&a).unwrap_or_else(|| panic!("{a} missing"));
        assert_eq!(s.display_name, p.name);
        assert_eq!((s.archived, s.trashed), (p.archived, p.trashed), "{a}");
        let mut want: Vec<(AliasKind, &str)> = p
            .keys
            .iter()
            .map(|k| (AliasKind::Key, k.as_str()))
            .collect();
        want.push((AliasKind::Name, &p.name));
        want.push((AliasKind::WebUrl, &p.web_url));
        assert_eq!(aliases.get(&a), Some(&set(&want)), "{a}");
    }
}

async fn jira_full_sync_gives_exact_spaces_and_every_key(db: TestDb) {
    let (sim, ctx) = jira(&db, 260).await;
    assert_eq!(sync(&ctx, JIRA).await, RunOutcome::Complete);
    assert_jira_matches(&db.store, &sim).await;
}

async fn jira_rename_and_key_change_keep_ids_and_old_key_resolves(db: TestDb) {
    let (sim, ctx) = jira(&db, 30).await;
    assert_eq!(sync(&ctx, JIRA).await, RunOutcome::Complete);
    let p = sim.projects()[4].clone();
    sim.change_project_key(&p.id, "PAY");
    sim.rename_project(&p.id, "Payments");
    assert_eq!(sync(&ctx, JIRA).await, RunOutcome::Complete);
    assert_jira_matches(&db.store, &sim).await;
    let a = SpaceAddress::new(SpaceKind::JiraProject, &sim.cloud_id(), &p.id).unwrap();
    for key in ["PAY", p.key.as_str()] {
        let found = db.store.resolve(key).await.unwrap();
        // The old key is still one of the project's keys: active, not retired.
        assert!(
            found.iter().any(|r| r.space.address == a && !r.retired),
            "{key}"
        );
    }
    let old_name = db.store.resolve(&p.name).await.unwrap();
    assert!(old_name.iter().any(|r| r.space.address == a && r.retired));
}

async fn jira_ten_percent_faults_still_end_with_the_exact_registry(db: TestDb) {
    let (sim, ctx) = jira(&db, 300).await;
    sim.set_faults(Faults {
        server_error: 0.04,
        rate_limited_429: 0.03,
        drop_connection: 0.02,
        truncated_body: 0.01,
        retry_after_secs: 0,
        ..Faults::default()
    });
    assert_eq!(sync(&ctx, JIRA).await, RunOutcome::Complete);
    assert_jira_matches(&db.store, &sim).await;
}

async fn jira_incomplete_listing_marks_nothing_missing(db: TestDb) {
    let (sim, ctx) = jira(&db, 150).await;
    assert_eq!(sync(&ctx, JIRA).await, RunOutcome::Complete);
    let gone = sim.projects()[0].clone();
    sim.delete_project(&gone.id);
    sim.set_faults(Faults {
        failing_pages: [2].into(),
        ..Faults::default()
    });
    assert_eq!(sync(&ctx, JIRA).await, RunOutcome::Partial);
    let a = SpaceAddress::new(SpaceKind::JiraProject, &sim.cloud_id(), &gone.id).unwrap();
    assert_eq!(
        db.store.get_space(&a).await.unwrap().unwrap().status,
        SpaceStatus::Active
    );
    assert_eq!(
        db.store
            .count_spaces(Some(JIRA), Some(SpaceStatus::Missing))
            .await
            .unwrap(),
        0
    );
}
