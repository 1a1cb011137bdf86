//! Each rung of the ladder on a fixture made for it, in memory.

use std::collections::HashMap;

use cmcp_domain::{AliasKind, SpaceAddress, SpaceKind};
use cmcp_matching::{Candidate, Evidence, Place, PlaceAlias, Settings, Space, Target, propose};

fn addr(kind: SpaceKind, tenant: &str, id: &str) -> SpaceAddress {
    SpaceAddress::new(kind, tenant, id).unwrap()
}

fn bb_project(id: &str, name: &str, key: Option<&str>) -> Space {
    Space {
        address: addr(SpaceKind::BitbucketProject, "acme", id),
        name: name.to_owned(),
        container: None,
        key: key.map(str::to_owned),
        fingerprints: vec![],
    }
}

fn repo(
    kind: SpaceKind,
    tenant: &str,
    id: &str,
    name: &str,
    container: &SpaceAddress,
    prints: &[(AliasKind, &str)],
) -> Space {
    Space {
        address: addr(kind, tenant, id),
        name: name.to_owned(),
        container: Some(container.clone()),
        key: None,
        fingerprints: prints.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
    }
}

fn place(id: &str, name: &str, key: Option<&str>) -> Place {
    Place {
        id: id.to_owned(),
        name: name.to_owned(),
        key: key.map(str::to_owned),
        retired: false,
        aliases: vec![],
    }
}

fn run(places: &[Place], spaces: &[Space], mappings: &[(&SpaceAddress, &str)]) -> Vec<Candidate> {
    let m: HashMap<SpaceAddress, String> = mappings
        .iter()
        .map(|(a, p)| ((*a).clone(), (*p).to_owned()))
        .collect();
    propose(places, spaces, &m, &Settings::default())
}

fn for_container<'a>(c: &'a [Candidate], a: &SpaceAddress) -> Vec<&'a Candidate> {
    c.iter().filter(|x| &x.container == a).collect()
}

fn target(c: &Candidate) -> &str {
    match &c.target {
        Target::Place(id) | Target::Create(id) => id,
    }
}

#[test]
fn key_equal_is_strong_evidence_in_words() {
    let p = bb_project("p1", "Anything", Some("pay"));
    let out = run(
        &[place("payments", "Payments", Some("PAY"))],
        std::slice::from_ref(&p),
        &[],
    );
    let c = for_container(&out, &p.address);
    assert_eq!(c.len(), 1);
    assert_eq!(target(c[0]), "payments");
    assert_eq!(
        c[0].evidence[0].words("Payments"),
        "key PAY equals place key PAY"
    );
    assert_eq!(c[0].confidence, 95);
}

#[test]
fn retired_key_alias_matches_with_less_confidence() {
    let p = bb_project("p1", "Anything", Some("OLD"));
    let mut pl = place("payments", "Payments", Some("PAY"));
    pl.aliases.push(PlaceAlias {
        is_key: true,
        raw: "OLD".into(),
        retired: true,
    });
    let out = run(&[pl], std::slice::from_ref(&p), &[]);
    assert!(matches!(
        out[0].evidence[0],
        Evidence::KeyEqual { retired: true, .. }
    ));
    assert_eq!(out[0].confidence, 85);
}

#[test]
fn name_equal_ignores_case_spaces_dashes_underscores() {
    let p = bb_project("p1", "Mobile_App-Team", None);
    let out = run(
        &[place("m", "mobile app team", None)],
        std::slice::from_ref(&p),
        &[],
    );
    assert_eq!(target(&out[0]), "m");
    assert!(matches!(
        out[0].evidence[0],
        Evidence::NameEqual {
            via_alias: false,
            ..
        }
    ));
}

#[test]
fn jira_key_in_repo_names_points_at_the_mapped_jira_projects_place() {
    let jira = Space {
        address: addr(SpaceKind::JiraProject, "acme.atlassian.net", "10001"),
        name: "Payments board".into(),
        container: None,
        key: Some("pay".into()),
        fingerprints: vec![],
    };
    let p = bb_project("p1", "Backend stuff", None);
    let r1 = repo(
        SpaceKind::BitbucketRepo,
        "acme",
        "r1",
        "PAY-ledger",
        &p.address,
        &[],
    );
    let r2 = repo(
        SpaceKind::BitbucketRepo,
        "acme",
        "r2",
        "PAY-api",
        &p.address,
        &[],
    );
    let out = run(
        &[place("payments", "Payments", None)],
        &[jira.clone(), p.clone(), r1, r2],
        &[(&jira.address, "payments")],
    );
    let c = for_container(&out, &p.address);
    assert_eq!(c.len(), 1);
    assert_eq!(target(c[0]), "payments");
    match &c[0].evidence[0] {
        Evidence::JiraKey {
            key, example_repo, ..
        } => assert_eq!((key.as_str(), example_repo.as_str()), ("PAY", "PAY-api")),
        other => panic!("{other:?}"),
    }
    assert!(
        c[0].evidence[0]
            .words("Payments")
            .starts_with("repos named PAY-… (e.g. PAY-api) and Jira project space:jira-project:")
    );
}

#[test]
fn same_remote_or_host_id_as_a_mapped_space_is_evidence() {
    let gh_org = addr(SpaceKind::GithubOrg, "github.com", "42");
    let mirror = repo(
        SpaceKind::GithubRepo,
        "github.com",
        "7",
        "ledger",
        &gh_org,
        &[(AliasKind::GitRemote, "example.com/acme/ledger")],
    );
    let p = bb_project("p1", "Unrelated", None);
    let r = repo(
        SpaceKind::BitbucketRepo,
        "acme",
        "r1",
        "ledger",
        &p.address,
        &[(AliasKind::GitRemote, "example.com/acme/ledger")],
    );
    let org = Space {
        address: gh_org.clone(),
        name: "acme-gh".into(),
        container: None,
        key: None,
        fingerprints: vec![],
    };
    let out = run(
        &[place("payments", "Payments", None)],
        &[org, mirror, p.clone(), r],
        &[(&gh_org, "payments")],
    );
    let c = for_container(&out, &p.address);
    assert_eq!(target(c[0]), "payments");
    assert!(
        matches!(&c[0].evidence[0], Evidence::SameFingerprint { what, .. } if what == "git remote")
    );

    let p2 = bb_project("p2", "Other", None);
    let host = repo(
        SpaceKind::BitbucketRepo,
        "acme",
        "r2",
        "x",
        &p2.address,
        &[(AliasKind::HostId, "{abc}")],
    );
    let mapped = repo(
        SpaceKind::BitbucketRepo,
        "acme",
        "r3",
        "y",
        &gh_org,
        &[(AliasKind::HostId, "{abc}")],
    );
    let out = run(
        &[place("payments", "Payments", None)],
        &[p2.clone(), host, mapped.clone()],
        &[(&mapped.address, "payments")],
    );
    assert!(
        matches!(&for_container(&out, &p2.address)[0].evidence[0], Evidence::SameFingerprint { what, .. } if what == "host repo id")
    );
}

#[test]
fn same_stable_id_already_mapped_under_another_address() {
    let old = addr(SpaceKind::BitbucketProject, "old-ws", "p1");
    let moved = Space {
        address: addr(SpaceKind::BitbucketProject, "new-ws", "p1"),
        name: "Zebra".into(),
        container: None,
        key: None,
        fingerprints: vec![],
    };
    let out = run(
        &[place("payments", "Payments", None)],
        std::slice::from_ref(&moved),
        &[(&old, "payments")],
    );
    assert!(matches!(
        out[0].evidence[0],
        Evidence::MappedStableId { .. }
    ));
    assert_eq!(out[0].confidence, 98);
}

#[test]
fn fuzzy_name_is_weak_and_still_offers_create() {
    let p = bb_project("p1", "Paymnets", None);
    let out = run(
        &[place("payments", "Payments", None)],
        std::slice::from_ref(&p),
        &[],
    );
    let c = for_container(&out, &p.address);
    assert_eq!(c.len(), 2, "{c:?}");
    let fuzzy = c.iter().find(|x| target(x) == "payments").unwrap();
    assert!(fuzzy.evidence.iter().all(Evidence::is_weak));
    assert!(fuzzy.confidence < 50);
    assert!(!fuzzy.conflict);
    assert!(
        c.iter()
            .any(|x| x.target == Target::Create("Paymnets".into()))
    );
}

#[test]
fn dissimilar_name_gets_only_a_create_proposal() {
    let p = bb_project("p1", "Quiet Corner", None);
    let out = run(
        &[place("payments", "Payments", None)],
        std::slice::from_ref(&p),
        &[],
    );
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].target, Target::Create("Quiet Corner".into()));
}

#[test]
fn two_strong_places_are_a_conflict() {
    let p = bb_project("p1", "Billing", Some("PAY"));
    let out = run(
        &[
            place("payments", "Payments", Some("PAY")),
            place("billing", "Billing", None),
        ],
        std::slice::from_ref(&p),
        &[],
    );
    assert_eq!(out.len(), 2);
    assert!(out.iter().all(|c| c.conflict));
}

#[test]
fn mapped_containers_retired_places_and_leaves_get_nothing() {
    let p = bb_project("p1", "Payments", Some("PAY"));
    let r = repo(
        SpaceKind::BitbucketRepo,
        "acme",
        "r1",
        "Payments",
        &p.address,
        &[],
    );
    let mut retired = place("old", "Payments", Some("PAY"));
    retired.retired = true;
    let out = run(&[retired.clone()], &[r], &[]);
    assert!(out.is_empty(), "a repo follows its container");
    let out = run(
        &[place("payments", "Payments", Some("PAY"))],
        std::slice::from_ref(&p),
        &[(&p.address, "payments")],
    );
    assert!(out.is_empty());
    let out = run(&[retired], &[p], &[]);
    assert_eq!(out.len(), 1);
    assert!(matches!(out[0].target, Target::Create(_)));
}

#[test]
fn evidence_hash_ignores_order_and_tracks_content() {
    let a = Evidence::NameEqual {
        name: "A".into(),
        place_name: "a".into(),
        via_alias: false,
    };
    let b = Evidence::KeyEqual {
        key: "K".into(),
        place_key: "K".into(),
        retired: false,
    };
    let h1 = cmcp_matching::evidence_hash("place:x", &[a.clone(), b.clone()]);
    assert_eq!(
        h1,
        cmcp_matching::evidence_hash("place:x", &[b.clone(), a.clone()])
    );
    assert_ne!(h1, cmcp_matching::evidence_hash("place:x", &[a]));
    assert_ne!(
        h1,
        cmcp_matching::evidence_hash("place:y", &[b, Evidence::NoMatch { name: "z".into() }])
    );
}

#[test]
fn similar_names_are_capped_to_the_best_few() {
    let places: Vec<Place> = (0..20)
        .map(|i| place(&format!("p{i}"), &format!("Payments platform {i}"), None))
        .collect();
    let p = bb_project("p1", "Payments platform 1x", None);
    let out = run(&places, std::slice::from_ref(&p), &[]);
    let fuzzy: Vec<_> = out
        .iter()
        .filter(|c| matches!(c.target, Target::Place(_)))
        .collect();
    assert_eq!(fuzzy.len(), 3, "{fuzzy:?}");
    let pct = |c: &Candidate| match c.evidence[0] {
        Evidence::FuzzyName { score_pct, .. } => score_pct,
        _ => 0,
    };
    let best = fuzzy.iter().map(|c| pct(c)).max().unwrap();
    let p1 = fuzzy
        .iter()
        .find(|c| target(c) == "p1")
        .expect("the closest name is kept");
    assert_eq!(pct(p1), best);
}

#[test]
fn same_first_commit_as_a_mapped_repo_is_medium_evidence() {
    const ROOT: &str = "a94a8fe5ccb19ba61c4c0873d391e987982fbbd3";
    let gh_org = addr(SpaceKind::GithubOrg, "github.com", "42");
    let org = Space {
        address: gh_org.clone(),
        name: "acme-gh".into(),
        container: None,
        key: None,
        fingerprints: vec![],
    };
    let mapped = repo(
        SpaceKind::GithubRepo,
        "github.com",
        "7",
        "ledger",
        &gh_org,
        &[(AliasKind::FirstCommit, ROOT)],
    );
    // A fork in another container: other remote, other name, same root.
    let p = bb_project("p1", "Contractor work", None);
    let fork = repo(
        SpaceKind::BitbucketRepo,
        "acme",
        "r1",
        "books-fork",
        &p.address,
        &[
            (AliasKind::FirstCommit, ROOT),
            (AliasKind::GitRemote, "bitbucket.org/acme/books-fork"),
        ],
    );
    let places = [place("payments", "Payments", None)];
    let spaces = [org, mapped.clone(), p.clone(), fork];
    let out = run(&places, &spaces, &[(&gh_org, "payments")]);
    let c = for_container(&out, &p.address);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(target(c[0]), "payments");
    assert_eq!(
        c[0].evidence,
        [Evidence::SameFirstCommit {
            sha: ROOT.into(),
            mapped_space: mapped.address.to_string(),
        }]
    );
    assert_eq!(
        c[0].evidence[0].words("Payments"),
        format!(
            "same first commit a94a8fe as {}, which is mapped to place Payments",
            mapped.address
        )
    );
    // Between a similar name and a shared remote or an equal name.
    assert_eq!(c[0].confidence, 60);
    assert!(!c[0].evidence[0].is_weak());
    assert!(!c[0].conflict);

    // Another root commit, or the same one only on an unmapped repo: nothing.
    let other_root = repo(
        SpaceKind::BitbucketRepo,
        "acme",
        "r1",
        "books-fork",
        &p.address,
        &[(AliasKind::FirstCommit, &"b".repeat(40))],
    );
    let out = run(
        &places,
        &[spaces[0].clone(), mapped.clone(), p.clone(), other_root],
        &[(&gh_org, "payments")],
    );
    let c = for_container(&out, &p.address);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].target, Target::Create("Contractor work".into()));
    let out = run(&places, &spaces, &[]);
    assert!(
        for_container(&out, &p.address)
            .iter()
            .all(|c| matches!(c.target, Target::Create(_)))
    );

    // A shared remote names the very repo and ranks above the root commit.
    let mirror = repo(
        SpaceKind::BitbucketRepo,
        "acme",
        "r1",
        "ledger",
        &p.address,
        &[
            (AliasKind::FirstCommit, ROOT),
            (AliasKind::GitRemote, "github.com/acme/ledger"),
        ],
    );
    let mut mapped_with_remote = mapped.clone();
    mapped_with_remote
        .fingerprints
        .push((AliasKind::GitRemote, "github.com/acme/ledger".into()));
    let out = run(
        &places,
        &[spaces[0].clone(), mapped_with_remote, p.clone(), mirror],
        &[(&gh_org, "payments")],
    );
    let c = for_container(&out, &p.address);
    assert_eq!(c.len(), 1, "{c:?}");
    assert!(
        matches!(&c[0].evidence[0], Evidence::SameFingerprint { what, .. } if what == "git remote")
    );
    assert!(matches!(
        &c[0].evidence[1],
        Evidence::SameFirstCommit { .. }
    ));
    assert_eq!(c[0].confidence, 92);
}
