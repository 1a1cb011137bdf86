//! Mapping proposals: stored once per evidence, decided in one transaction
//! with their mapping and audit entry, superseded when evidence changes.

use cmcp_domain::{Platform, SpaceAddress, SpaceKind};
use cmcp_registry::testing::TestDb;
use cmcp_registry::{
    Decision, NewProposal, PlaceInput, ProposalFigures, ProposalFilter, ProposalState,
    ProposalTarget, RegistryError, Store,
};

both_backends!(
    same_evidence_proposes_once_and_changed_evidence_supersedes,
    approval_maps_and_undo_unmaps_in_one_transaction,
    a_bulk_decision_with_one_invalid_item_leaves_nothing,
);

fn project(n: u32) -> SpaceAddress {
    SpaceAddress::new(SpaceKind::BitbucketProject, "acme", &format!("{{p-{n}}}")).unwrap()
}

fn candidate(n: u32, place: &str, hash: &str) -> NewProposal {
    NewProposal {
        container: project(n),
        space_name: format!("Project {n}"),
        target: ProposalTarget::Place(place.to_owned()),
        evidence: serde_json::json!({"key": "PAY"}),
        evidence_text: vec!["the project key PAY is the place's key".to_owned()],
        confidence: 90,
        conflict: false,
        evidence_hash: hash.to_owned(),
    }
}

async fn with_places(s: &Store) {
    let places: Vec<PlaceInput> = ["pay", "search"]
        .iter()
        .map(|id| PlaceInput {
            id: (*id).to_owned(),
            kind: "project".to_owned(),
            name: id.to_uppercase(),
            key: None,
            aliases: vec![],
            members: None,
        })
        .collect();
    s.put_places(&places, "cli").await.unwrap();
}

async fn in_state(s: &Store, state: ProposalState) -> Vec<i64> {
    s.list_proposals(&ProposalFilter {
        state: Some(state),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_iter()
    .map(|p| p.id)
    .collect()
}

async fn same_evidence_proposes_once_and_changed_evidence_supersedes(db: TestDb) {
    let s = &db.store;
    with_places(s).await;
    let round = [candidate(1, "pay", "h1"), candidate(2, "search", "h2")];
    let figures = s.sync_proposals(&round).await.unwrap();
    assert_eq!(
        figures,
        ProposalFigures {
            proposed: 2,
            ..Default::default()
        }
    );
    let again = s.sync_proposals(&round).await.unwrap();
    assert_eq!(
        again,
        ProposalFigures {
            unchanged: 2,
            ..Default::default()
        }
    );
    let first = s
        .get_proposal(in_state(s, ProposalState::Proposed).await[0])
        .await
        .unwrap();
    assert_eq!(first.platform, Platform::Bitbucket);
    assert_eq!(first.target, ProposalTarget::Place("pay".to_owned()));
    assert_eq!(first.evidence_text, candidate(1, "pay", "h1").evidence_text);
    // Project 2's evidence changed: its open proposal is superseded.
    let changed = [candidate(1, "pay", "h1"), candidate(2, "search", "h3")];
    let figures = s.sync_proposals(&changed).await.unwrap();
    assert_eq!(
        (figures.proposed, figures.superseded, figures.unchanged),
        (1, 1, 1)
    );
    assert_eq!(in_state(s, ProposalState::Superseded).await.len(), 1);
    assert_eq!(in_state(s, ProposalState::Proposed).await.len(), 2);
    let filtered = s
        .count_proposals(&ProposalFilter {
            text: Some("PROJECT 2".to_owned()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(filtered, 2, "case-insensitive search of the space name");
}

async fn approval_maps_and_undo_unmaps_in_one_transaction(db: TestDb) {
    let s = &db.store;
    with_places(s).await;
    s.sync_proposals(&[candidate(1, "pay", "h1"), candidate(1, "search", "h2")])
        .await
        .unwrap();
    let open = in_state(s, ProposalState::Proposed).await;
    assert_eq!(open.len(), 2);
    let decided = s
        .decide_proposals(
            &open[..1],
            Decision::Approve,
            "admin:alice",
            Some("obvious"),
        )
        .await
        .unwrap();
    assert_eq!(decided[0].state, ProposalState::Approved);
    let mappings = s.list_mappings().await.unwrap();
    assert_eq!(mappings.len(), 1);
    assert_eq!(mappings[0].space_address, project(1).to_string());
    assert_eq!(mappings[0].proposal_id, Some(open[0]));
    assert_eq!(mappings[0].approved_by, "admin:alice");
    // The container's other open proposal is superseded by the approval.
    assert_eq!(
        s.get_proposal(open[1]).await.unwrap().state,
        ProposalState::Superseded
    );
    let audit = s.list_audit(1).await.unwrap();
    assert_eq!(audit[0].action, "proposal.approve");
    assert_eq!(audit[0].reason.as_deref(), Some("obvious"));
    s.decide_proposals(&open[..1], Decision::Undo, "admin:alice", None)
        .await
        .unwrap();
    assert!(s.list_mappings().await.unwrap().is_empty());
    let undone = s.get_proposal(open[0]).await.unwrap();
    assert_eq!(
        (undone.state, undone.decided_by),
        (ProposalState::Proposed, None)
    );
}

async fn a_bulk_decision_with_one_invalid_item_leaves_nothing(db: TestDb) {
    let s = &db.store;
    with_places(s).await;
    s.sync_proposals(&[candidate(1, "pay", "h1"), candidate(2, "search", "h2")])
        .await
        .unwrap();
    let open = in_state(s, ProposalState::Proposed).await;
    let audit_before = s.list_audit(100).await.unwrap().len();
    let unknown = s
        .decide_proposals(&[open[0], 999_999], Decision::Approve, "admin:alice", None)
        .await;
    assert!(
        matches!(unknown, Err(RegistryError::NotFound { .. })),
        "{unknown:?}"
    );
    let twice = s
        .decide_proposals(&[open[0], open[0]], Decision::Reject, "admin:alice", None)
        .await;
    assert!(
        matches!(twice, Err(RegistryError::Invalid { .. })),
        "{twice:?}"
    );
    assert!(s.list_mappings().await.unwrap().is_empty());
    assert_eq!(in_state(s, ProposalState::Proposed).await, open);
    assert_eq!(s.list_audit(100).await.unwrap().len(), audit_before);
    // A place retired since the proposal cannot be approved.
    s.put_places(
        &[PlaceInput {
            id: "search".to_owned(),
            kind: "project".to_owned(),
            name: "SEARCH".to_owned(),
            key: None,
            aliases: vec![],
            members: None,
        }],
        "cli",
    )
    .await
    .unwrap();
    let retired = s
        .decide_proposals(&open, Decision::Approve, "admin:alice", None)
        .await;
    assert!(
        matches!(retired, Err(RegistryError::Invalid { .. })),
        "{retired:?}"
    );
    assert!(s.list_mappings().await.unwrap().is_empty());
}

/// Two workers' syncs refresh proposals at once: the second round read
/// before the first committed the same evidence, so its INSERT meets the
/// first's row on the unique key. The round must go on (the row stands,
/// counted unchanged), not fail whole: the fleet bench logged
/// "could not refresh mapping proposals: proposals_once_per_evidence
/// already exists" from one of its two workers.
#[tokio::test(flavor = "multi_thread")]
async fn a_round_that_meets_a_concurrent_rounds_proposal_keeps_it() {
    let Some((db, pool)) = crate::support::postgres_only().await else {
        return;
    };
    with_places(&db.store).await;
    // The other round: its row written, not yet committed.
    let mut other = pool.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO proposals (container, platform, space_name, target, place_id, create_name, \
         evidence_json, evidence_text, confidence, conflict, state, evidence_hash, created_at) \
         VALUES ($1, 'bitbucket', 'Project 1', 'place:pay', 'pay', NULL, '{}', '', 90, false, \
         'proposed', 'h1', 0)",
    )
    .bind(project(1).to_string())
    .execute(&mut *other)
    .await
    .unwrap();
    let store = db.store.clone();
    let round = tokio::spawn(async move {
        store
            .sync_proposals_of(
                &[project(1).to_string(), project(2).to_string()],
                &[candidate(1, "pay", "h1"), candidate(2, "search", "h2")],
            )
            .await
    });
    // Until this round's INSERT of the same evidence waits on the key.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (waiting,): (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND wait_event_type = 'Lock'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        if waiting > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the round never waited on the other's row"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    other.commit().await.unwrap();
    let figures = round.await.unwrap().unwrap();
    assert_eq!(
        figures,
        ProposalFigures {
            proposed: 1,
            unchanged: 1,
            ..Default::default()
        }
    );
    assert_eq!(in_state(&db.store, ProposalState::Proposed).await.len(), 2);
}
