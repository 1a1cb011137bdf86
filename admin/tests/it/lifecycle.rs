//! The proposal lifecycle against a real store.

use cmcp_domain::{Alias, AliasKind, SpaceRecord};
use cmcp_registry::Decision;
use cmcp_registry::testing::TestDb;

use crate::support::{connection, place, project, proposals, put, refresh, repo};

both_backends!(
    key_and_name_rungs_are_stored_with_evidence_in_words,
    rerun_with_same_evidence_proposes_nothing_new,
    rejected_stays_rejected_until_evidence_changes,
    conflict_is_reported_not_resolved,
    same_first_commit_rung_fires_on_stored_aliases,
    approval_writes_mapping_and_undo_removes_it,
    retired_place_key_still_matches_and_says_so,
    places_missing_from_import_are_retired_not_deleted,
    a_persons_spaces_never_become_company_proposals,
    changed_evidence_supersedes_an_open_proposal,
    demo_seed_leaves_proposals_and_an_admin_key,
);

pub async fn key_and_name_rungs_are_stored_with_evidence_in_words(db: TestDb) {
    let s = &db.store;
    connection(s, "bb").await;
    put(
        s,
        &[
            project(1, "PAY", "Payments team"),
            project(2, "XX", "Mobile_App"),
            project(3, "ZZ", "Quiet Corner"),
        ],
    )
    .await;
    s.put_places(
        &[
            place("pay", "Payments", Some("PAY")),
            place("mob", "mobile app", None),
        ],
        "t",
    )
    .await
    .unwrap();
    refresh(s).await;
    let open = proposals(s, "proposed").await;
    let pay = open
        .iter()
        .find(|p| p.space_name == "Payments team")
        .unwrap();
    assert_eq!(pay.place_id.as_deref(), Some("pay"));
    assert!(
        pay.evidence_text
            .iter()
            .any(|t| t == "key PAY equals place key PAY"),
        "{:?}",
        pay.evidence_text
    );
    let mob = open.iter().find(|p| p.space_name == "Mobile_App").unwrap();
    assert_eq!(mob.place_id.as_deref(), Some("mob"));
    assert!(mob.evidence_text[0].contains("equals place name \"mobile app\" after normalising"));
    let quiet = open
        .iter()
        .find(|p| p.space_name == "Quiet Corner")
        .unwrap();
    assert_eq!(quiet.create_name.as_deref(), Some("Quiet Corner"));
    assert!(quiet.evidence_text[0].contains("create cMCP project \"Quiet Corner\""));
}

pub async fn rerun_with_same_evidence_proposes_nothing_new(db: TestDb) {
    let s = &db.store;
    connection(s, "bb").await;
    put(s, &[project(1, "PAY", "Payments")]).await;
    s.put_places(&[place("pay", "Payments", Some("PAY"))], "t")
        .await
        .unwrap();
    let first = refresh(s).await;
    assert_eq!(first.proposed, 1);
    let again = refresh(s).await;
    assert_eq!(
        (again.proposed, again.superseded, again.unchanged),
        (0, 0, 1)
    );
}

pub async fn rejected_stays_rejected_until_evidence_changes(db: TestDb) {
    let s = &db.store;
    connection(s, "bb").await;
    let p = project(1, "PAY", "Payments");
    put(s, std::slice::from_ref(&p)).await;
    s.put_places(&[place("pay", "Payments", None)], "t")
        .await
        .unwrap();
    refresh(s).await;
    let id = proposals(s, "proposed").await[0].id;
    s.decide_proposals(&[id], Decision::Reject, "admin", Some("not ours"))
        .await
        .unwrap();
    refresh(s).await;
    assert!(
        proposals(s, "proposed").await.is_empty(),
        "a rejected proposal came back"
    );
    // New evidence: the place gets the key PAY.
    s.put_places(&[place("pay", "Payments", Some("PAY"))], "t")
        .await
        .unwrap();
    refresh(s).await;
    let back = proposals(s, "proposed").await;
    assert_eq!(back.len(), 1);
    assert_ne!(back[0].id, id);
    assert!(
        back[0]
            .evidence_text
            .iter()
            .any(|t| t.starts_with("key PAY"))
    );
    assert_eq!(proposals(s, "rejected").await.len(), 1);
}

pub async fn conflict_is_reported_not_resolved(db: TestDb) {
    let s = &db.store;
    connection(s, "bb").await;
    put(s, &[project(1, "PAY", "Billing")]).await;
    s.put_places(
        &[
            place("pay", "Payments", Some("PAY")),
            place("bill", "Billing", None),
        ],
        "t",
    )
    .await
    .unwrap();
    refresh(s).await;
    let open = proposals(s, "proposed").await;
    assert_eq!(open.len(), 2);
    assert!(open.iter().all(|p| p.conflict));
    assert!(
        s.list_mappings().await.unwrap().is_empty(),
        "nothing is mapped by guessing"
    );
    // Approving both targets of one container is refused as a whole.
    let ids: Vec<i64> = open.iter().map(|p| p.id).collect();
    assert!(
        s.decide_proposals(&ids, Decision::Approve, "admin", None)
            .await
            .is_err()
    );
    assert!(s.list_mappings().await.unwrap().is_empty());
}

pub async fn approval_writes_mapping_and_undo_removes_it(db: TestDb) {
    let s = &db.store;
    connection(s, "bb").await;
    let p = project(1, "PAY", "Payments");
    put(
        s,
        &[
            p.clone(),
            repo(1, &p, "PAY-api", "git@bitbucket.org:acme/pay-api.git"),
        ],
    )
    .await;
    s.put_places(&[place("pay", "Payments", Some("PAY"))], "t")
        .await
        .unwrap();
    refresh(s).await;
    let id = proposals(s, "proposed").await[0].id;
    s.decide_proposals(&[id], Decision::Approve, "admin", Some("looks right"))
        .await
        .unwrap();
    let maps = s.list_mappings().await.unwrap();
    assert_eq!(maps.len(), 1);
    assert_eq!(
        (maps[0].place_id.as_str(), maps[0].proposal_id),
        ("pay", Some(id))
    );
    refresh(s).await;
    assert!(
        proposals(s, "proposed").await.is_empty(),
        "a mapped container gets no proposals"
    );
    s.decide_proposals(&[id], Decision::Undo, "admin", Some("wrong click"))
        .await
        .unwrap();
    assert!(s.list_mappings().await.unwrap().is_empty());
    let audit = s.list_audit(10).await.unwrap();
    assert_eq!(audit[0].action, "proposal.undo");
    assert_eq!(audit[0].reason.as_deref(), Some("wrong click"));
    assert_eq!(audit[1].action, "proposal.approve");
}

pub async fn retired_place_key_still_matches_and_says_so(db: TestDb) {
    let s = &db.store;
    connection(s, "bb").await;
    put(s, &[project(1, "OLD", "Something else")]).await;
    s.put_places(&[place("pay", "Payments", Some("OLD"))], "t")
        .await
        .unwrap();
    s.put_places(&[place("pay", "Payments", Some("PAY"))], "t")
        .await
        .unwrap();
    refresh(s).await;
    let open = proposals(s, "proposed").await;
    let p = open
        .iter()
        .find(|p| p.place_id.as_deref() == Some("pay"))
        .unwrap();
    assert_eq!(
        p.evidence_text[0],
        "key OLD equals the retired key OLD of place Payments"
    );
}

pub async fn places_missing_from_import_are_retired_not_deleted(db: TestDb) {
    let s = &db.store;
    let f = s
        .put_places(&[place("a", "A", None), place("b", "B", None)], "t")
        .await
        .unwrap();
    assert_eq!(f.created, 2);
    let again = s
        .put_places(&[place("a", "A", None), place("b", "B", None)], "t")
        .await
        .unwrap();
    assert_eq!((again.unchanged, again.created, again.updated), (2, 0, 0));
    let f = s.put_places(&[place("a", "A", None)], "t").await.unwrap();
    assert_eq!(f.retired, 1);
    let all = s.list_places().await.unwrap();
    assert_eq!(all.len(), 2);
    assert!(all.iter().find(|p| p.id == "b").unwrap().is_retired());
}

pub async fn a_persons_spaces_never_become_company_proposals(db: TestDb) {
    let s = &db.store;
    crate::support::connection_of(s, "ann", cmcp_domain::Owner::Person("ann".into())).await;
    s.apply_page(
        "ann",
        &cmcp_domain::Owner::Person("ann".into()),
        &[project(1, "PAY", "Payments")],
    )
    .await
    .unwrap();
    s.put_places(&[place("pay", "Payments", Some("PAY"))], "t")
        .await
        .unwrap();
    let f = refresh(s).await;
    assert_eq!(f.proposed, 0);
    assert!(proposals(s, "proposed").await.is_empty());
}

pub async fn demo_seed_leaves_proposals_and_an_admin_key(db: TestDb) {
    let s = &db.store;
    connection(s, "bb").await;
    put(
        s,
        &[project(1, "PAY", "Payments"), project(2, "ZZZ", "Sandbox")],
    )
    .await;
    let key = cmcp_admin::seed_demo_places_and_key(s).await.unwrap();
    let open = proposals(s, "proposed").await;
    assert!(
        open.iter()
            .any(|p| p.place_id.as_deref() == Some("payments"))
    );
    assert!(
        open.iter()
            .any(|p| p.create_name.as_deref() == Some("Sandbox"))
    );
    let k = s
        .key_by_hash(&cmcp_admin::hash_secret(&key))
        .await
        .unwrap()
        .unwrap();
    assert!(
        k.has_power(cmcp_registry::Power::Mappings)
            && k.has_power(cmcp_registry::Power::Connections)
    );
}

pub async fn changed_evidence_supersedes_an_open_proposal(db: TestDb) {
    let s = &db.store;
    connection(s, "bb").await;
    put(s, &[project(1, "PAY", "Payments")]).await;
    s.put_places(&[place("pay", "Payments", None)], "t")
        .await
        .unwrap();
    refresh(s).await;
    let first = proposals(s, "proposed").await;
    assert_eq!(first.len(), 1);
    s.put_places(&[place("pay", "Payments", Some("PAY"))], "t")
        .await
        .unwrap();
    let f = refresh(s).await;
    assert_eq!((f.proposed, f.superseded), (1, 1));
    let superseded = proposals(s, "superseded").await;
    assert_eq!(superseded[0].id, first[0].id);
    let now = proposals(s, "proposed").await;
    assert_eq!(now.len(), 1);
    assert!(now[0].confidence > first[0].confidence);
}

/// The first-commit rung works on what the store holds, not only on the
/// ladder's in-memory input: a fork in an unmapped project shares its root
/// commit with a repo of a mapped project.
pub async fn same_first_commit_rung_fires_on_stored_aliases(db: TestDb) {
    let s = &db.store;
    connection(s, "bb").await;
    let root = "a94a8fe5ccb19ba61c4c0873d391e987982fbbd3";
    let with_root = |mut r: SpaceRecord| {
        r.aliases.extend(Alias::new(AliasKind::FirstCommit, root));
        r
    };
    let pay = project(1, "PAY", "Payments");
    let zeta = project(2, "ZZZ", "Zeta Contractors");
    put(
        s,
        &[
            pay.clone(),
            with_root(repo(
                1,
                &pay,
                "pay-api",
                "git@bitbucket.org:acme/pay-api.git",
            )),
            zeta.clone(),
            with_root(repo(
                2,
                &zeta,
                "pay-api-fork",
                "git@bitbucket.org:zeta/pay-api-fork.git",
            )),
        ],
    )
    .await;
    s.put_places(&[place("pay", "Payments", Some("PAY"))], "t")
        .await
        .unwrap();
    refresh(s).await;
    let pay_proposal = proposals(s, "proposed")
        .await
        .into_iter()
        .find(|p| p.container == pay.address)
        .unwrap();
    s.decide_proposals(
        &[pay_proposal.id],
        Decision::Approve,
        "admin",
        Some("key match"),
    )
    .await
    .unwrap();
    refresh(s).await;
    let zeta_proposals: Vec<_> = proposals(s, "proposed")
        .await
        .into_iter()
        .filter(|p| p.container == zeta.address)
        .collect();
    let by_root = zeta_proposals
        .iter()
        .find(|p| p.place_id.as_deref() == Some("pay"))
        .unwrap_or_else(|| panic!("no proposal of Zeta → Payments: {zeta_proposals:#?}"));
    assert!(
        by_root
            .evidence_text
            .iter()
            .any(|t| t.contains("same first commit a94a8fe")),
        "{:?}",
        by_root.evidence_text
    );
}
