//! Google Drive end to end: full syncs into the registry, the changes feed,
//! faults and pagination traps — each behaviour on SQLite and PostgreSQL.

use cmcp_domain::{AliasKind, RunOutcome, SpaceStatus};
use cmcp_fixtures::{DriveSimConfig, Faults};
use cmcp_registry::testing::TestDb;
use cmcp_tests::{DRIVE_CONNECTION, DriveHarness, assert_drive_registry_matches};
use cmcp_worker::change_feed::{IncrementalOutcome, IncrementalReport, run_full, run_incremental};
use cmcp_worker::{SyncOutcome, run_sync};

both_backends!(
    full_drive_sync_gives_exactly_the_drives_folders_aliases_and_containers,
    folder_rename_keeps_the_id_and_the_old_path_resolves_as_retired,
    empty_pages_before_the_end_do_not_end_the_drive_listing,
    ten_percent_drive_faults_still_end_with_the_exact_registry,
    incomplete_drive_listing_marks_nothing_missing,
    removed_change_tombstones_only_after_a_direct_read_confirms_it,
);

fn domain() -> DriveSimConfig {
    DriveSimConfig {
        drives: 4,
        folders_per_level: 3,
        depth: 3,
        max_drives_page: 3,
        max_files_page: 10,
        ..DriveSimConfig::default()
    }
}

async fn full(h: &DriveHarness) -> (RunOutcome, cmcp_domain::RunFigures, Option<String>) {
    match run_full(&h.ctx, DRIVE_CONNECTION, cmcp_domain::RunTrigger::Test)
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

async fn space(h: &DriveHarness, id: &str) -> cmcp_registry::SpaceRow {
    let a = h.folder_address(id);
    h.store().get_space(&a).await.unwrap().expect("space")
}

async fn incremental(h: &DriveHarness) -> IncrementalReport {
    match run_incremental(&h.ctx, DRIVE_CONNECTION)
        .await
        .expect("incremental")
    {
        IncrementalOutcome::Applied(r) => r,
        other => panic!("{other:?}"),
    }
}

async fn full_drive_sync_gives_exactly_the_drives_folders_aliases_and_containers(db: TestDb) {
    let h = DriveHarness::start(db, domain(), 2).await;
    let (outcome, figures, error) = full(&h).await;
    assert_eq!(outcome, RunOutcome::Complete, "{error:?}");
    assert_eq!(figures.created, 4 + 4 * (3 + 9));
    assert_drive_registry_matches(&h).await;
    // Every drive's changes position was recorded.
    assert_eq!(
        h.store()
            .drive_page_tokens(DRIVE_CONNECTION)
            .await
            .unwrap()
            .len(),
        4
    );
    // A second sync changes nothing.
    let (outcome, figures, _) = full(&h).await;
    assert_eq!(outcome, RunOutcome::Complete);
    assert_eq!(
        (figures.created, figures.updated, figures.unchanged),
        (0, 0, 52)
    );
}

async fn folder_rename_keeps_the_id_and_the_old_path_resolves_as_retired(db: TestDb) {
    let h = DriveHarness::start(db, domain(), 2).await;
    full(&h).await;
    let top = h.sim.folders().into_iter().find(|f| f.depth == 1).unwrap();
    let child = h
        .sim
        .folders()
        .into_iter()
        .find(|f| f.parent == top.id)
        .unwrap();
    h.sim.rename_folder(&top.id, "Renamed Top");
    let report = incremental(&h).await;
    assert!(report.renamed >= 1, "{report:?}");
    assert_drive_registry_matches(&h).await;

    // Same id; the old path and name resolve, marked retired.
    let address = h.folder_address(&top.id);
    let found = h.store().resolve(&top.path).await.unwrap();
    let hit = found
        .iter()
        .find(|r| r.space.address == address)
        .expect("old path resolves");
    assert!(hit.retired);
    assert_eq!(hit.alias.as_ref().unwrap().kind, AliasKind::Path);
    let now = h.sim.folder(&top.id).unwrap();
    assert!(now.path.ends_with("/Renamed Top"));
    let current = h.store().resolve(&now.path).await.unwrap();
    assert!(
        current
            .iter()
            .any(|r| r.space.address == address && !r.retired)
    );
    // The child (not in the feed) got its new path too.
    let child_now = h.sim.folder(&child.id).unwrap();
    assert_eq!(
        h.store()
            .get_space(&h.folder_address(&child.id))
            .await
            .unwrap()
            .unwrap()
            .display_name,
        child_now.path
    );
    // A full sync agrees and finds nothing more to do.
    let (_, figures, _) = full(&h).await;
    assert_eq!(
        (figures.created, figures.updated, figures.renamed),
        (0, 0, 0)
    );
}

async fn empty_pages_before_the_end_do_not_end_the_drive_listing(db: TestDb) {
    let h = DriveHarness::start(
        db,
        DriveSimConfig {
            empty_page_rate: 0.5,
            ..domain()
        },
        3,
    )
    .await;
    let (outcome, figures, error) = full(&h).await;
    assert_eq!(outcome, RunOutcome::Complete, "{error:?}");
    assert_drive_registry_matches(&h).await;
    let content_pages = 2 + 4 * 4; // 2 drive pages, 39 folders per drive in pages of 10
    assert!(figures.pages > content_pages, "{figures:?}");
}

async fn ten_percent_drive_faults_still_end_with_the_exact_registry(db: TestDb) {
    let h = DriveHarness::start(
        db,
        DriveSimConfig {
            faults: Faults {
                server_error: 0.03,
                rate_limited_429: 0.02,
                secondary_403: 0.03,
                drop_connection: 0.01,
                truncated_body: 0.01,
                ..Faults::default()
            },
            seed: 11,
            ..domain()
        },
        3,
    )
    .await;
    let (outcome, figures, error) = full(&h).await;
    assert_eq!(outcome, RunOutcome::Complete, "{error:?}");
    assert!(figures.retries > 0);
    assert!(h.sim.stats().rate_limited > 0);
    assert_drive_registry_matches(&h).await;
}

async fn incomplete_drive_listing_marks_nothing_missing(db: TestDb) {
    let h = DriveHarness::start(db, domain(), 3).await;
    full(&h).await;
    let before = h
        .store()
        .count_spaces(Some(DRIVE_CONNECTION), Some(SpaceStatus::Active))
        .await
        .unwrap();
    let victim = h.sim.folders().into_iter().find(|f| f.depth == 3).unwrap();
    h.sim.delete_folder(&victim.id);
    h.sim.set_faults(Faults {
        failing_pages: [2].into_iter().collect(),
        ..Faults::default()
    });
    let result = run_sync(&h.ctx, DRIVE_CONNECTION, cmcp_domain::RunTrigger::Test)
        .await
        .unwrap();
    let (Some(outcome), Some(figures)) = (result.run_outcome(), result.figures().cloned()) else {
        panic!("deferred")
    };
    assert_eq!(outcome, RunOutcome::Partial);
    assert_eq!(figures.missing, 0);
    assert_eq!(
        h.store()
            .count_spaces(Some(DRIVE_CONNECTION), Some(SpaceStatus::Active))
            .await
            .unwrap(),
        before
    );
    // Once the listing is complete again, the deleted folder is missing.
    h.sim.set_faults(Faults::default());
    let (outcome, figures, _) = full(&h).await;
    assert_eq!(outcome, RunOutcome::Complete);
    assert_eq!(figures.missing, 1);
    assert_drive_registry_matches(&h).await;
}

async fn removed_change_tombstones_only_after_a_direct_read_confirms_it(db: TestDb) {
    let h = DriveHarness::start(db, domain(), 2).await;
    // No positions yet: the first incremental is a full sync.
    match run_incremental(&h.ctx, DRIVE_CONNECTION).await.unwrap() {
        IncrementalOutcome::FullSync(done) if done.run_outcome().is_some() => {
            assert_eq!(done.run_outcome(), Some(RunOutcome::Complete))
        }
        other => panic!("{other:?}"),
    }
    let tops: Vec<_> = h
        .sim
        .folders()
        .into_iter()
        .filter(|f| f.depth == 1)
        .collect();
    let (deleted, still_readable, trashed) = (&tops[0], &tops[1], &tops[2]);
    h.sim.delete_folder(&deleted.id);
    h.sim.emit_removed_change(&still_readable.id);
    h.sim.trash_folder(&trashed.id);
    let created = h.sim.create_folder(&still_readable.id, "Brand New");

    let report = incremental(&h).await;
    // The deleted folder and its 3 listed children: 404 on a direct read.
    assert_eq!(report.tombstoned, 4, "{report:?}");
    assert_eq!(space(&h, &deleted.id).await.status, SpaceStatus::Tombstoned);
    // Removed from the feed but still readable: kept.
    let kept = space(&h, &still_readable.id).await;
    assert_eq!(kept.status, SpaceStatus::Active);
    assert!(!kept.trashed);
    // Trashed but readable: kept, and marked trashed.
    let t = space(&h, &trashed.id).await;
    assert_eq!(t.status, SpaceStatus::Active);
    assert!(t.trashed);
    // The new folder arrived through the same path as a sync.
    let new = space(&h, &created).await;
    assert_eq!(new.container, Some(h.folder_address(&still_readable.id)));
    assert!(new.display_name.ends_with("/Brand New"));
    // The position advanced: a second pass finds nothing.
    let again = incremental(&h).await;
    assert_eq!(again.changes, 0);
    // The aliases of the tombstoned folder still explain what it was.
    let hits = h.store().resolve(&deleted.path).await.unwrap();
    assert!(
        hits.iter()
            .any(|r| r.space.status == SpaceStatus::Tombstoned)
    );
}
