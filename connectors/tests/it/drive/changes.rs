//! Direct reads and the changes feed.

use cmcp_connectors::drive::FolderRead;
use cmcp_connectors::{Connector, ReadOutcome};
use cmcp_domain::{SpaceAddress, SpaceKind};
use cmcp_fixtures::DriveSimConfig;

use super::{connector, start};

fn cfg() -> DriveSimConfig {
    DriveSimConfig {
        drives: 2,
        folders_per_level: 2,
        depth: 3,
        ..DriveSimConfig::default()
    }
}

#[tokio::test]
async fn a_folder_reads_by_id_with_its_path_and_depth_and_a_deleted_one_is_gone() {
    let sim = start(cfg()).await;
    let c = connector(&sim, 2);
    let deep = sim.folders().into_iter().find(|f| f.depth == 3).unwrap();
    match c.read_folder(&deep.id).await.unwrap() {
        FolderRead::Found { record, depth } => {
            assert_eq!(depth, 3);
            assert_eq!(record.display_name, deep.path);
            assert_eq!(record.address.stable_id(), deep.id);
        }
        other => panic!("{other:?}"),
    }
    sim.trash_folder(&deep.id);
    match c.read_folder(&deep.id).await.unwrap() {
        FolderRead::Found { record, .. } => assert!(record.state.trashed),
        other => panic!("{other:?}"),
    }
    sim.delete_folder(&deep.id);
    assert_eq!(c.read_folder(&deep.id).await.unwrap(), FolderRead::Gone);
    let address = SpaceAddress::new(SpaceKind::DriveFolder, &sim.domain(), &deep.id).unwrap();
    assert_eq!(c.read(&address).await.unwrap(), ReadOutcome::Gone);
    let drive = &sim.drives()[0];
    let address = SpaceAddress::new(SpaceKind::DriveSharedDrive, &sim.domain(), &drive.id).unwrap();
    match c.read(&address).await.unwrap() {
        ReadOutcome::Found(r) => assert_eq!(r.display_name, drive.name),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn the_changes_feed_reports_renames_and_removals_since_the_start_token() {
    let sim = start(cfg()).await;
    let c = connector(&sim, 2);
    let drive = sim.drives()[0].id.clone();
    let other = sim.drives()[1].id.clone();
    let start_token = c.start_page_token(&drive).await.unwrap();
    let empty = c.changes(&drive, &start_token).await.unwrap();
    assert!(empty.changes.is_empty());
    assert_eq!(empty.new_start_page_token, start_token);

    let mine: Vec<_> = sim
        .folders()
        .into_iter()
        .filter(|f| f.drive_id == drive && f.depth == 1)
        .collect();
    sim.rename_folder(&mine[0].id, "Renamed");
    sim.delete_folder(&mine[1].id);
    let elsewhere = sim
        .folders()
        .into_iter()
        .find(|f| f.drive_id == other)
        .unwrap();
    sim.rename_folder(&elsewhere.id, "Not this drive");

    let batch = c.changes(&drive, &start_token).await.unwrap();
    let renamed = batch
        .changes
        .iter()
        .find(|ch| ch.file_id.as_deref() == Some(mine[0].id.as_str()))
        .unwrap();
    assert!(!renamed.removed);
    assert_eq!(renamed.file.as_ref().unwrap().name, "Renamed");
    // Deleting a folder removes its subtree: 1 + 2 + 4 removed entries.
    assert_eq!(batch.changes.iter().filter(|ch| ch.removed).count(), 7);
    assert!(
        batch
            .changes
            .iter()
            .all(|ch| ch.file_id.as_deref() != Some(elsewhere.id.as_str()))
    );
    assert_ne!(batch.new_start_page_token, start_token);
    let again = c
        .changes(&drive, &batch.new_start_page_token)
        .await
        .unwrap();
    assert!(again.changes.is_empty());
}
