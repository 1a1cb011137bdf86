//! The incremental refresh against the store: after any change, refreshing
//! only what changed leaves exactly the proposals a full recompute gives.
//!
//! Random small registries (projects in two workspaces sharing stable ids,
//! repos named after Jira keys, remotes, host ids and root commits drawn
//! from small pools, places with keys, retired keys and aliases) take
//! random changes (renames, moves, new keys and fingerprints, new spaces,
//! tombstones and restores, private spaces taken over, approvals, undos,
//! rejections, places changed without their recompute). After each round
//! the incremental refresh runs; then a full
//! recompute must find nothing to propose, supersede or re-score.

use std::collections::BTreeSet;

use cmcp_domain::{
    Alias, AliasKind, ConnectionSpec, Owner, Platform, SpaceAddress, SpaceKind, SpaceRecord,
    SpaceState, Token,
};
use cmcp_matching::refresh::to_rows;
use cmcp_matching::suggest::{round_of, suggest};
use cmcp_matching::{
    Evidence, FingerprintKind, Place, Settings, Space, input_near, load_input, private_spaces,
    propose, refresh_all_suggestions, refresh_changed, refresh_proposals, refresh_suggestions,
    refresh_suggestions_after_decision,
};
use cmcp_registry::testing::{AnotherRound, TestDb, cipher};
use cmcp_registry::{
    Decision, NewConnection, PlaceInput, ProposalFilter, ProposalState, Store, SuggestionState,
    both_backends,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

both_backends!(
    incremental_refresh_equals_full_recompute_after_random_changes,
    rejected_stays_rejected_and_a_rerun_proposes_nothing,
    the_full_recompute_pages_through_every_container_and_supersedes_the_gone,
    a_round_waits_for_the_turn_and_then_reads_what_changed_meanwhile,
    a_persons_suggestions_read_by_index_are_the_whole_registrys,
    a_company_sync_refreshes_the_suggestions_it_changes,
    a_persons_round_waits_for_their_turn_and_reads_what_changed_meanwhile,
);

const COMPANY: &str = "bb-acme";
const PERSON: &str = "bb-ada";
const NAMES: [&str; 10] = [
    "Payments",
    "pay_ments",
    "Paymnets",
    "Ledger",
    "LEDGER",
    "Mobile App",
    "Search",
    "Quiet corner",
    "Billing",
    "Searchh",
];
const KEYS: [&str; 6] = ["PAY", "LED", "MOB", "OLD", "ZZZ", "SRC"];
const REPO_NAMES: [&str; 8] = [
    "PAY-api",
    "pay-ledger",
    "LED-core",
    "SRC-index",
    "misc",
    "ZZZ-x",
    "tools",
    "MOB-app",
];

async fn connection(store: &Store, id: &str, owner: Owner) {
    store
        .create_connection(
            &cipher(),
            NewConnection {
                id: id.to_owned(),
                spec: ConnectionSpec {
                    platform: Platform::Bitbucket,
                    scope: "acme".to_owned(),
                    base_url: "https://api.bitbucket.org/2.0".to_owned(),
                },
                owner,
                token: Token::new("bb-token-SECRET"),
                settings: serde_json::json!({}),
            },
            "test",
        )
        .await
        .unwrap();
}

fn address(kind: SpaceKind, tenant: &str, id: &str) -> SpaceAddress {
    SpaceAddress::new(kind, tenant, id).unwrap()
}

fn record(address: SpaceAddress, name: &str, container: Option<SpaceAddress>) -> SpaceRecord {
    SpaceRecord {
        aliases: Alias::new(AliasKind::Name, name).into_iter().collect(),
        address,
        display_name: name.to_owned(),
        container,
        state: SpaceState::default(),
    }
}

fn set_alias(r: &mut SpaceRecord, kind: AliasKind, raw: Option<&str>) {
    r.aliases.retain(|a| a.kind != kind);
    r.aliases.extend(raw.and_then(|raw| Alias::new(kind, raw)));
}

fn pick<'a, T>(rng: &mut StdRng, items: &'a [T]) -> &'a T {
    &items[rng.random_range(0..items.len())]
}

fn word(rng: &mut StdRng, words: &[&'static str]) -> &'static str {
    words[rng.random_range(0..words.len())]
}

/// The registry as the test wrote it.
struct World {
    containers: Vec<SpaceRecord>,
    repos: Vec<SpaceRecord>,
    private: Vec<SpaceRecord>,
    places: Vec<PlaceInput>,
    next: u32,
}

fn remote(rng: &mut StdRng) -> Option<String> {
    rng.random_bool(0.7)
        .then(|| format!("https://example.com/acme/r{}.git", rng.random_range(0..6)))
}

fn root(rng: &mut StdRng) -> Option<String> {
    rng.random_bool(0.4)
        .then(|| format!("{:x}", rng.random_range(0..4u8)).repeat(40))
}

fn host(rng: &mut StdRng) -> Option<String> {
    rng.random_bool(0.3)
        .then(|| format!("{{node-{}}}", rng.random_range(0..4)))
}

impl World {
    fn new_container(&mut self, rng: &mut StdRng) -> SpaceRecord {
        self.next += 1;
        // Two workspaces reuse project ids: the same stable id elsewhere.
        let tenant = if rng.random_bool(0.3) {
            "other"
        } else {
            "acme"
        };
        let id = format!("p{}", rng.random_range(0..self.next.max(2)));
        let mut r = record(
            address(SpaceKind::BitbucketProject, tenant, &id),
            word(rng, &NAMES),
            None,
        );
        if rng.random_bool(0.6) {
            set_alias(&mut r, AliasKind::Key, Some(word(rng, &KEYS)));
        }
        r
    }

    fn new_jira(&mut self, rng: &mut StdRng) -> SpaceRecord {
        self.next += 1;
        let site = if rng.random_bool(0.5) {
            "acme.atlassian.net"
        } else {
            "b.atlassian.net"
        };
        let mut r = record(
            address(
                SpaceKind::JiraProject,
                site,
                &format!("{}", 10_000 + self.next),
            ),
            word(rng, &NAMES),
            None,
        );
        set_alias(&mut r, AliasKind::Key, Some(word(rng, &KEYS)));
        r
    }

    fn new_repo(&mut self, rng: &mut StdRng) -> SpaceRecord {
        self.next += 1;
        let container = pick(rng, &self.containers).address.clone();
        let mut r = record(
            address(SpaceKind::BitbucketRepo, "acme", &format!("r{}", self.next)),
            word(rng, &REPO_NAMES),
            Some(container),
        );
        set_alias(&mut r, AliasKind::GitRemote, remote(rng).as_deref());
        set_alias(&mut r, AliasKind::FirstCommit, root(rng).as_deref());
        set_alias(&mut r, AliasKind::HostId, host(rng).as_deref());
        r
    }
}

async fn apply(store: &Store, r: &SpaceRecord) {
    store
        .apply_page(COMPANY, &Owner::Company, std::slice::from_ref(r))
        .await
        .unwrap();
}

async fn tombstone(store: &Store, address: &SpaceAddress) {
    let sql = "UPDATE spaces SET status = 'tombstoned', tombstoned_at = 1 WHERE address = $1";
    let a = address.to_string();
    match store {
        Store::Sqlite(pool) => {
            sqlx::query(sql).bind(a).execute(pool).await.unwrap();
        }
        Store::Postgres(pool) => {
            sqlx::query(sql).bind(a).execute(pool).await.unwrap();
        }
    }
}

async fn places(store: &Store) -> Vec<PlaceInput> {
    let place = |id: &str, name: &str, key: Option<&str>, aliases: &[&str]| PlaceInput {
        id: id.to_owned(),
        kind: "project".to_owned(),
        name: name.to_owned(),
        key: key.map(str::to_owned),
        aliases: aliases.iter().map(|a| (*a).to_owned()).collect(),
        members: None,
    };
    let mut list = vec![
        place("payments", "Payments", Some("OLD"), &[]),
        place("ledger", "Ledger", Some("LED"), &["Books"]),
        place("mobile", "Mobile App", Some("MOB"), &[]),
        place("search", "Search", None, &["Searching"]),
        place("billing", "Billing", Some("PAY"), &[]),
    ];
    store.put_places(&list, "test").await.unwrap();
    // A changed key keeps the old one as a retired key.
    list[0].key = Some("PAY".into());
    store.put_places(&list, "test").await.unwrap();
    list
}

type Snapshot = BTreeSet<(String, String, String, String, i64, bool)>;

async fn snapshot(store: &Store) -> Snapshot {
    store
        .list_proposals(&ProposalFilter::default())
        .await
        .unwrap()
        .into_iter()
        .map(|p| {
            (
                p.container.to_string(),
                p.target.as_db(),
                p.evidence_hash,
                p.state.to_string(),
                p.confidence,
                p.conflict,
            )
        })
        .collect()
}

/// The stored proposals against the in-memory ladder run over the whole
/// registry at once: every open proposal is one of its candidates, scored
/// the same, and every candidate is stored open or decided (a decided one
/// stays decided while its evidence stays; an approved "create" maps
/// nothing until the place exists). Both stored paths read
/// neighbourhoods by index, so this is what shows they read enough.
async fn assert_whole_ladder_agrees(store: &Store, settings: &Settings, round: usize) {
    let (places, spaces, mappings) = load_input(store).await.unwrap();
    let candidates = propose(&places, &spaces, &mappings, settings);
    let whole: BTreeSet<(String, String, String, i64, bool)> = to_rows(&places, &candidates)
        .into_iter()
        .map(|c| {
            (
                c.container.to_string(),
                c.target.as_db(),
                c.evidence_hash,
                c.confidence,
                c.conflict,
            )
        })
        .collect();
    let stored = snapshot(store).await;
    for (container, target, hash, state, confidence, conflict) in &stored {
        let key = (
            container.clone(),
            target.clone(),
            hash.clone(),
            *confidence,
            *conflict,
        );
        if state == "proposed" {
            assert!(
                whole.contains(&key),
                "round {round}: stored {key:?} is not what the whole ladder proposes"
            );
        }
    }
    for key in &whole {
        let (container, target, hash, confidence, conflict) = key;
        assert!(
            stored.iter().any(|(c, t, h, s, conf, x)| c == container
                && t == target
                && h == hash
                && (s == "proposed" && conf == confidence && x == conflict
                    || s == "rejected"
                    || s == "approved")),
            "round {round}: the whole ladder proposes {key:?}, not stored; stored: {:?}; whole: {:?}",
            stored
                .iter()
                .filter(|s| &s.0 == container)
                .collect::<Vec<_>>(),
            candidates
                .iter()
                .filter(|c| c.container.to_string() == *container)
                .collect::<Vec<_>>()
        );
    }
}

async fn ids_in(store: &Store, state: ProposalState) -> Vec<i64> {
    store
        .list_proposals(&ProposalFilter {
            state: Some(state),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect()
}

async fn decide_random(store: &Store, rng: &mut StdRng, from: ProposalState, d: Decision) {
    let ids = ids_in(store, from).await;
    if !ids.is_empty() {
        // An approval may be refused (the container is mapped already).
        let _ = store
            .decide_proposals(&[*pick(rng, &ids)], d, "admin", None)
            .await;
    }
}

/// The people of the suggestions test: Ada (repos from the company's
/// pools), Bo (repos known by their names only), Cy (projects with keys).
const PEOPLE: [&str; 3] = ["ada", "bo", "cy"];

/// Cy, whose projects carry only keys (the key rung starts from them as
/// well as from a repo named after one, as Ada's and Bo's are), and Bo,
/// whose repos only carry names, some headed by a Jira key.
async fn add_bo_and_cy(store: &Store, rng: &mut StdRng) {
    connection(store, "bb-cy", Owner::Person("cy".into())).await;
    for (i, key) in KEYS.iter().enumerate() {
        let mut r = record(
            address(SpaceKind::BitbucketProject, "cy", &format!("own{i}")),
            word(rng, &NAMES),
            None,
        );
        set_alias(&mut r, AliasKind::Key, Some(&key.to_lowercase()));
        apply_owned(store, "bb-cy", "cy", &r).await;
    }
    connection(store, "bb-bo", Owner::Person("bo".into())).await;
    for (i, name) in REPO_NAMES.iter().enumerate() {
        let r = record(
            address(SpaceKind::BitbucketRepo, "bo", &format!("b{i}")),
            name,
            None,
        );
        apply_owned(store, "bb-bo", "bo", &r).await;
    }
}

/// Everyone's rounds on the whole registry.
async fn rounds(
    store: &Store,
) -> std::collections::BTreeMap<&'static str, Vec<cmcp_registry::NewSuggestion>> {
    let (places, company, mappings) = load_input(store).await.unwrap();
    let mut out = std::collections::BTreeMap::new();
    for person in PEOPLE {
        let private = private_spaces(store, person).await.unwrap();
        out.insert(person, stored(&places, &company, &mappings, &private));
    }
    out
}

/// A person's round as it would be stored (words and hashes with the
/// places' names; they belong to no place).
fn stored(
    places: &[Place],
    company: &[Space],
    mappings: &std::collections::HashMap<SpaceAddress, String>,
    private: &[Space],
) -> Vec<cmcp_registry::NewSuggestion> {
    round_of(places, company, mappings, private, &Default::default())
}

/// A private repo of Ada's, drawn from the company's pools of names,
/// remotes, root commits and host ids.
async fn add_private(store: &Store, w: &mut World, rng: &mut StdRng) {
    let mut r = w.new_repo(rng);
    r.address = address(SpaceKind::BitbucketRepo, "acme", &format!("x{}", w.next));
    apply_owned(store, PERSON, "ada", &r).await;
    w.private.push(r);
}

/// `r` as `person`'s, listed by their connection `connection`.
async fn apply_owned(store: &Store, connection: &str, person: &str, r: &SpaceRecord) {
    store
        .apply_page(
            connection,
            &Owner::Person(person.into()),
            std::slice::from_ref(r),
        )
        .await
        .unwrap();
}

/// One random change to the registry or its decisions.
async fn change(store: &Store, w: &mut World, rng: &mut StdRng) {
    let kind = rng.random_range(0..14);
    change_of(store, w, rng, kind).await;
}

/// The changes a company connection's sync makes (no decision, no private
/// repo of its own, no places import).
const COMPANY_SYNC: [u32; 9] = [0, 1, 2, 3, 4, 5, 6, 7, 9];

/// One random change of kind `kind` ([`change`]).
async fn change_of(store: &Store, w: &mut World, rng: &mut StdRng, kind: u32) {
    match kind {
        0 => {
            let i = rng.random_range(0..w.repos.len());
            w.repos[i].display_name = word(rng, &REPO_NAMES).to_string();
            apply(store, &w.repos[i]).await;
        }
        1 => {
            let i = rng.random_range(0..w.containers.len());
            let name = word(rng, &NAMES).to_string();
            w.containers[i].display_name = name.clone();
            set_alias(&mut w.containers[i], AliasKind::Name, Some(&name));
            apply(store, &w.containers[i]).await;
        }
        2 => {
            let i = rng.random_range(0..w.repos.len());
            w.repos[i].container = Some(pick(rng, &w.containers).address.clone());
            apply(store, &w.repos[i]).await;
        }
        3 => {
            let i = rng.random_range(0..w.containers.len());
            let key = rng.random_bool(0.8).then(|| word(rng, &KEYS));
            set_alias(&mut w.containers[i], AliasKind::Key, key);
            apply(store, &w.containers[i]).await;
        }
        4 => {
            let i = rng.random_range(0..w.repos.len());
            set_alias(
                &mut w.repos[i],
                AliasKind::GitRemote,
                remote(rng).as_deref(),
            );
            set_alias(
                &mut w.repos[i],
                AliasKind::FirstCommit,
                root(rng).as_deref(),
            );
            set_alias(&mut w.repos[i], AliasKind::HostId, host(rng).as_deref());
            apply(store, &w.repos[i]).await;
        }
        5 => {
            let r = if rng.random_bool(0.5) {
                w.new_repo(rng)
            } else if rng.random_bool(0.5) {
                w.new_container(rng)
            } else {
                w.new_jira(rng)
            };
            apply(store, &r).await;
            if r.container.is_some() {
                w.repos.push(r);
            } else {
                w.containers.push(r);
            }
        }
        6 => {
            let all: Vec<SpaceAddress> = w
                .containers
                .iter()
                .chain(&w.repos)
                .map(|r| r.address.clone())
                .collect();
            tombstone(store, pick(rng, &all)).await;
        }
        7 => {
            // A listing that sees it again restores it.
            let r = if rng.random_bool(0.5) {
                pick(rng, &w.repos)
            } else {
                pick(rng, &w.containers)
            };
            apply(store, &r.clone()).await;
        }
        // A person's private repo (never matched) sharing a remote…
        8 => add_private(store, w, rng).await,
        9 => {
            // …until a company connection sees it and takes it over.
            if let Some(r) = w.private.pop() {
                apply(store, &r).await;
                w.repos.push(r);
            }
        }
        10 => decide_random(store, rng, ProposalState::Proposed, Decision::Approve).await,
        11 => {
            let from = if rng.random_bool(0.5) {
                ProposalState::Approved
            } else {
                ProposalState::Rejected
            };
            decide_random(store, rng, from, Decision::Undo).await;
        }
        12 => decide_random(store, rng, ProposalState::Proposed, Decision::Reject).await,
        _ => {
            // A places import whose own recompute did not run: the next
            // refresh must notice the places changed.
            let i = rng.random_range(0..w.places.len());
            if rng.random_bool(0.5) {
                w.places[i].name = word(rng, &NAMES).to_owned();
            } else {
                w.places[i].key = rng.random_bool(0.7).then(|| word(rng, &KEYS).to_owned());
            }
            // Two places may now share a name: the import refuses nothing
            // for that, but keep ids unique as it requires.
            store.put_places(&w.places, "test").await.unwrap();
        }
    }
}

async fn build(store: &Store, rng: &mut StdRng) -> World {
    connection(store, COMPANY, Owner::Company).await;
    connection(store, PERSON, Owner::Person("ada".into())).await;
    let mut w = World {
        places: places(store).await,
        containers: Vec::new(),
        repos: Vec::new(),
        private: Vec::new(),
        next: 0,
    };
    for _ in 0..8 {
        let c = w.new_container(rng);
        if !w.containers.iter().any(|x| x.address == c.address) {
            w.containers.push(c);
        }
    }
    for _ in 0..3 {
        let j = w.new_jira(rng);
        w.containers.push(j);
    }
    for _ in 0..16 {
        let r = w.new_repo(rng);
        w.repos.push(r);
    }
    for r in w.containers.iter().chain(&w.repos) {
        apply(store, r).await;
    }
    refresh_proposals(store, &Settings::default())
        .await
        .unwrap();
    // Some containers start mapped (Jira projects among them).
    for _ in 0..4 {
        decide_random(store, rng, ProposalState::Proposed, Decision::Approve).await;
    }
    refresh_proposals(store, &Settings::default())
        .await
        .unwrap();
    w
}

fn evidence_kinds(store_rows: &[cmcp_registry::ProposalRow], seen: &mut BTreeSet<String>) {
    for p in store_rows {
        for e in p.evidence.as_array().into_iter().flatten() {
            seen.extend(e["kind"].as_str().map(str::to_owned));
        }
        if p.conflict {
            seen.insert("conflict".into());
        }
    }
}

async fn incremental_refresh_equals_full_recompute_after_random_changes(db: TestDb) {
    let store = &db.store;
    let settings = Settings::default();
    let mut seen = BTreeSet::new();
    // One database per backend test: each seed adds its own registry on top
    // of the last (new spaces, new decisions), which only makes it richer.
    let mut rng = StdRng::seed_from_u64(14);
    let mut w = build(store, &mut rng).await;
    for round in 0..80 {
        for _ in 0..rng.random_range(1..=3) {
            change(store, &mut w, &mut rng).await;
        }
        refresh_changed(store, &settings).await.unwrap();
        let incremental = snapshot(store).await;
        let full = refresh_proposals(store, &settings).await.unwrap();
        let after = snapshot(store).await;
        for x in incremental.symmetric_difference(&after) {
            eprintln!(
                "round {round} diff {x:?} in_incremental={}",
                incremental.contains(x)
            );
        }
        assert_eq!(
            (full.proposed, full.superseded),
            (0, 0),
            "round {round}: the full recompute changed what the incremental one left"
        );
        assert_eq!(
            incremental,
            snapshot(store).await,
            "round {round}: re-scored"
        );
        assert_whole_ladder_agrees(store, &settings, round).await;
        let rows = store
            .list_proposals(&ProposalFilter::default())
            .await
            .unwrap();
        evidence_kinds(&rows, &mut seen);
    }
    // The registry exercised every rung, so the equality above means something.
    for kind in [
        "mapped-stable-id",
        "key-equal",
        "name-equal",
        "jira-key",
        "same-fingerprint",
        "same-first-commit",
        "fuzzy-name",
        "no-match",
        "conflict",
    ] {
        assert!(seen.contains(kind), "no {kind} in any round: {seen:?}");
    }
}

async fn rejected_stays_rejected_and_a_rerun_proposes_nothing(db: TestDb) {
    let store = &db.store;
    let settings = Settings::default();
    connection(store, COMPANY, Owner::Company).await;
    places(store).await;
    let mut project = record(
        address(SpaceKind::BitbucketProject, "acme", "p1"),
        "Ledger",
        None,
    );
    apply(store, &project).await;
    let other = record(
        address(SpaceKind::BitbucketProject, "acme", "p2"),
        "Quiet corner",
        None,
    );
    apply(store, &other).await;
    let first = refresh_changed(store, &settings).await.unwrap();
    assert_eq!(first.proposed, 2, "{first:?}");
    let ledger = ids_in(store, ProposalState::Proposed).await;
    let rows = store
        .list_proposals(&ProposalFilter::default())
        .await
        .unwrap();
    let id = rows
        .iter()
        .find(|p| p.container == project.address)
        .map(|p| p.id)
        .unwrap();
    assert!(ledger.contains(&id));
    store
        .decide_proposals(&[id], Decision::Reject, "admin", Some("not ours"))
        .await
        .unwrap();
    // Nothing else changed: the decided container is looked at again and
    // left alone, and a further run finds nothing new. (On PostgreSQL a
    // change the horizon still held back is looked at again too: only
    // `unchanged` may count it.)
    for _ in 0..2 {
        let again = refresh_changed(store, &settings).await.unwrap();
        assert_eq!((again.proposed, again.superseded), (0, 0), "{again:?}");
        assert_eq!(
            store.get_proposal(id).await.unwrap().state,
            ProposalState::Rejected
        );
    }
    // Another space changes: the rejection stands.
    let mut other = other;
    other.display_name = "Quieter corner".into();
    apply(store, &other).await;
    refresh_changed(store, &settings).await.unwrap();
    assert_eq!(
        store.get_proposal(id).await.unwrap().state,
        ProposalState::Rejected
    );
    // Its own evidence changes (a key now equal to the place's): a new
    // proposal, and the rejected one stays rejected.
    set_alias(&mut project, AliasKind::Key, Some("LED"));
    apply(store, &project).await;
    let figures = refresh_changed(store, &settings).await.unwrap();
    assert_eq!(figures.proposed, 1, "{figures:?}");
    assert_eq!(
        store.get_proposal(id).await.unwrap().state,
        ProposalState::Rejected
    );
    let again = refresh_changed(store, &settings).await.unwrap();
    assert_eq!((again.proposed, again.superseded), (0, 0), "{again:?}");
}

/// The full recompute reads the registry a page of containers at a time:
/// containers on every page (more than two pages here) get their
/// proposals, and the open proposals of containers tombstoned since the
/// last run are superseded by its last step, not left open.
async fn the_full_recompute_pages_through_every_container_and_supersedes_the_gone(db: TestDb) {
    let store = &db.store;
    let settings = Settings::default();
    connection(store, COMPANY, Owner::Company).await;
    places(store).await;
    let projects: Vec<SpaceRecord> = (0..1_203)
        .map(|i| {
            record(
                address(SpaceKind::BitbucketProject, "acme", &format!("q{i:04}")),
                if i % 2 == 0 { "Ledger" } else { "Quiet corner" },
                None,
            )
        })
        .collect();
    store
        .apply_page(COMPANY, &Owner::Company, &projects)
        .await
        .unwrap();
    let first = refresh_proposals(store, &settings).await.unwrap();
    let open = |rows: &[cmcp_registry::ProposalRow], a: &SpaceAddress| {
        rows.iter()
            .filter(|p| &p.container == a && p.state == ProposalState::Proposed)
            .count()
    };
    let rows = store
        .list_proposals(&ProposalFilter::default())
        .await
        .unwrap();
    for p in &projects {
        assert!(
            open(&rows, &p.address) >= 1,
            "{} has no proposal",
            p.address
        );
    }
    assert_eq!(first.proposed as usize, rows.len(), "{first:?}");
    let gone = [&projects[0], &projects[600], &projects[1_202]];
    let expected: usize = gone.iter().map(|p| open(&rows, &p.address)).sum();
    for p in gone {
        tombstone(store, &p.address).await;
    }
    let again = refresh_proposals(store, &settings).await.unwrap();
    assert_eq!(
        (again.proposed, again.superseded as usize),
        (0, expected),
        "{again:?}"
    );
    let rows = store
        .list_proposals(&ProposalFilter::default())
        .await
        .unwrap();
    for p in gone {
        assert_eq!(open(&rows, &p.address), 0, "{} still open", p.address);
    }
    assert_eq!(open(&rows, &projects[601].address), 1);
}

/// Rounds of proposals take turns across processes (an advisory lock on
/// PostgreSQL; on SQLite, whose store one process holds, every pool of the
/// file shares its turn): a round that starts while another process runs
/// one waits, and once it has the turn reads what was committed meanwhile,
/// so it cannot write proposals from a view older than the round before
/// it. The rounds of one process wait for another's holding no more than
/// one connection. A turn dropped without being given back (its round
/// cancelled, or panicked) is not kept.
async fn a_round_waits_for_the_turn_and_then_reads_what_changed_meanwhile(db: TestDb) {
    use std::time::Duration;
    let store = &db.store;
    connection(store, COMPANY, Owner::Company).await;
    places(store).await;
    let project =
        |id: &str, name: &str| record(address(SpaceKind::BitbucketProject, "acme", id), name, None);
    apply(store, &project("p1", "Ledger")).await;

    let another = AnotherRound::begin(&db).await;
    let round = tokio::spawn({
        let store = store.clone();
        async move { refresh_changed(&store, &Settings::default()).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !round.is_finished(),
        "the round began while another process ran one"
    );
    apply(store, &project("p2", "Payments")).await;
    another.end().await;
    let figures = tokio::time::timeout(Duration::from_secs(30), round)
        .await
        .expect("the round goes ahead once the other has ended")
        .unwrap()
        .unwrap();
    assert_eq!(
        figures.proposed, 2,
        "the round reads the change committed while it waited: {figures:?}"
    );

    // Rounds of this process waiting for another process's hold one
    // connection of the pool between them: more of them than the pool has
    // connections leave it room for everything else.
    let another = AnotherRound::begin(&db).await;
    let waiting: Vec<_> = (0..12)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { refresh_changed(&store, &Settings::default()).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    tokio::time::timeout(Duration::from_secs(5), store.change_head())
        .await
        .expect("the pool has a connection for others while rounds wait")
        .unwrap();
    another.end().await;
    for round in waiting {
        tokio::time::timeout(Duration::from_secs(30), round)
            .await
            .expect("each waiting round runs in turn")
            .unwrap()
            .unwrap();
    }

    drop(store.matching_turn().await.unwrap());
    let another = tokio::time::timeout(Duration::from_secs(30), AnotherRound::begin(&db))
        .await
        .expect("a turn dropped without being given back is not kept");
    another.end().await;
}

/// A person's round reads the company by index from their own spaces
/// ([`input_near`]); for three people, on random registries after random changes
/// (renames, tombstones, take-overs, approvals and undos, places changed)
/// it finds exactly what the rungs find on the whole registry, and the
/// rounds between them reach every rung a person's space can climb. An
/// ADMIN decision reaches everyone whose round it changes
/// ([`refresh_suggestions_after_decision`]): Ada, Bo, whose repos are
/// known by their names only, and Cy, whose projects by their keys only.
async fn a_persons_suggestions_read_by_index_are_the_whole_registrys(db: TestDb) {
    let store = &db.store;
    let mut rng = StdRng::seed_from_u64(41);
    let mut w = build(store, &mut rng).await;
    add_bo_and_cy(store, &mut rng).await;
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    let mut suggested = 0;
    let mut mattered: BTreeSet<&str> = BTreeSet::new();
    for round in 0..60 {
        for _ in 0..rng.random_range(1..=3) {
            change(store, &mut w, &mut rng).await;
        }
        if round % 3 == 0 {
            // More private repos than the changes alone make.
            add_private(store, &mut w, &mut rng).await;
        }
        let (places, company, mappings) = load_input(store).await.unwrap();
        let mut whole = Vec::new();
        for person in PEOPLE {
            let private = private_spaces(store, person).await.unwrap();
            let (near_places, near, near_mappings) = input_near(store, &private).await.unwrap();
            assert_eq!(
                stored(&near_places, &near, &near_mappings, &private),
                stored(&places, &company, &mappings, &private),
                "round {round}: read by index, {person}'s round stores something else"
            );
            assert!(
                near.len() <= company.len() && near_places.len() <= places.len(),
                "round {round}: read more than the registry has"
            );
            whole.extend(suggest(&places, &company, &mappings, &private));
        }
        // An ADMIN decision reaches each person whose round it changes.
        let from = if rng.random_bool(0.6) {
            ProposalState::Proposed
        } else {
            ProposalState::Approved
        };
        let ids = ids_in(store, from).await;
        if !ids.is_empty() {
            let d = match from {
                ProposalState::Proposed => Decision::Approve,
                _ => Decision::Undo,
            };
            let before = rounds(store).await;
            // An approval may be refused (the container is mapped already).
            if let Ok(decided) = store
                .decide_proposals(&[*pick(&mut rng, &ids)], d, "admin", Some("test"))
                .await
            {
                let after = rounds(store).await;
                let containers: Vec<String> =
                    decided.iter().map(|p| p.container.to_string()).collect();
                let reached = refresh_suggestions_after_decision(store, &containers)
                    .await
                    .unwrap();
                for (person, round_before) in &before {
                    if after[person] != *round_before {
                        assert!(
                            reached.contains(*person),
                            "round {round}: a decision on {containers:?} changed {person}'s round and did not reach them"
                        );
                        mattered.insert(*person);
                    }
                }
            }
        }
        suggested += whole.len();
        for m in &whole {
            for e in &m.evidence {
                seen.insert(match e {
                    Evidence::SameFirstCommit { .. } => "first commit",
                    Evidence::SameFingerprint {
                        what: FingerprintKind::HostRepoId,
                        ..
                    } => "host id",
                    Evidence::SameFingerprint { .. } => "remote",
                    Evidence::JiraKey { .. } => "jira key",
                    _ => "other",
                });
            }
        }
    }
    assert!(suggested > 0, "no round suggested anything");
    // Bo is reached only by the names of his repos, Cy only by keys.
    assert_eq!(
        mattered,
        BTreeSet::from(PEOPLE),
        "decisions changed the rounds of"
    );
    for rung in ["first commit", "host id", "remote", "jira key"] {
        assert!(seen.contains(rung), "no {rung} in any round: {seen:?}");
    }
}

/// A person's open suggestions as stored: their space, the place, the
/// evidence and the confidence.
async fn open_suggestions(store: &Store, person: &str) -> BTreeSet<(String, String, String, i64)> {
    store
        .list_suggestions(person)
        .await
        .unwrap()
        .into_iter()
        .filter(|s| s.state == SuggestionState::Open)
        .map(|s| {
            (
                s.space_address.to_string(),
                s.place_id.unwrap_or_default(),
                s.evidence.to_string(),
                s.confidence,
            )
        })
        .collect()
}

/// What a person's round stores, in [`open_suggestions`]' terms.
fn as_open(round: &[cmcp_registry::NewSuggestion]) -> BTreeSet<(String, String, String, i64)> {
    round
        .iter()
        .map(|s| {
            (
                s.space_address.to_string(),
                s.place_id.clone(),
                s.evidence.to_string(),
                s.confidence,
            )
        })
        .collect()
}

/// After a company connection's sync, the incremental refresh also
/// refreshes the suggestions of the people its changes reach
/// ([`company_changes_reach`]), without waiting for their own next sync:
/// after each round of random company changes (renames, moves, new keys
/// and fingerprints, retired ones, tombstones and restores, private repos
/// taken over), every person's stored suggestions are their round on the
/// whole registry. Ada's own new repos are refreshed by her own sync, as
/// the worker does.
async fn a_company_sync_refreshes_the_suggestions_it_changes(db: TestDb) {
    let store = &db.store;
    let settings = Settings::default();
    let mut rng = StdRng::seed_from_u64(73);
    let mut w = build(store, &mut rng).await;
    add_bo_and_cy(store, &mut rng).await;
    for _ in 0..6 {
        add_private(store, &mut w, &mut rng).await;
    }
    refresh_changed(store, &settings).await.unwrap();
    refresh_all_suggestions(store).await.unwrap();
    let mut mattered: BTreeSet<&str> = BTreeSet::new();
    for round in 0..60 {
        if round % 4 == 0 {
            // Ada's own sync lists another repo and refreshes her.
            add_private(store, &mut w, &mut rng).await;
            refresh_suggestions(store, "ada").await.unwrap();
        }
        let before = rounds(store).await;
        for _ in 0..rng.random_range(1..=3) {
            let kind = *pick(&mut rng, &COMPANY_SYNC);
            change_of(store, &mut w, &mut rng, kind).await;
        }
        refresh_changed(store, &settings).await.unwrap();
        let after = rounds(store).await;
        for person in PEOPLE {
            if after[person] != before[person] {
                mattered.insert(person);
            }
            assert_eq!(
                open_suggestions(store, person).await,
                as_open(&after[person]),
                "round {round}: {person}'s stored suggestions are not their round after a company sync"
            );
        }
    }
    assert_eq!(
        mattered,
        BTreeSet::from(PEOPLE),
        "company changes changed the rounds of"
    );
}

/// A round of a person's suggestions waits while another process runs one
/// for them ([`Store::suggestion_turn`]), and then reads what changed
/// meanwhile: two rounds for one person never commit in the wrong order.
async fn a_persons_round_waits_for_their_turn_and_reads_what_changed_meanwhile(db: TestDb) {
    use std::time::Duration;
    let store = &db.store;
    let mut rng = StdRng::seed_from_u64(5);
    let mut w = build(store, &mut rng).await;
    refresh_suggestions(store, "ada").await.unwrap();

    let another = AnotherRound::of_person(&db, "ada").await;
    let round = tokio::spawn({
        let store = store.clone();
        async move { refresh_suggestions(&store, "ada").await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !round.is_finished(),
        "Ada's round began while another process ran one for her"
    );
    // Meanwhile Ada's sync lists repos that change her round.
    let before = rounds(store).await["ada"].clone();
    while rounds(store).await["ada"] == before {
        add_private(store, &mut w, &mut rng).await;
    }
    another.end().await;
    tokio::time::timeout(Duration::from_secs(30), round)
        .await
        .expect("the round goes ahead once the other has ended")
        .unwrap()
        .unwrap();
    assert_eq!(
        open_suggestions(store, "ada").await,
        as_open(&rounds(store).await["ada"]),
        "the round reads what changed while it waited"
    );

    drop(store.suggestion_turn("ada").await.unwrap());
    let another =
        tokio::time::timeout(Duration::from_secs(30), AnotherRound::of_person(&db, "ada"))
            .await
            .expect("a turn dropped without being given back is not kept");
    another.end().await;
}
