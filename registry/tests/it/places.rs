//! cMCP's places: one idempotent import; a missing place is retired, a
//! changed key keeps the old one as a retired alias.

use cmcp_registry::testing::TestDb;
use cmcp_registry::{PlaceAliasKind, PlaceFigures, PlaceInput, RegistryError};

both_backends!(
    import_creates_updates_and_retires_places,
    a_changed_key_keeps_the_old_key_retired,
    invalid_imports_change_nothing,
);

fn place(id: &str, name: &str, key: Option<&str>) -> PlaceInput {
    PlaceInput {
        id: id.to_owned(),
        kind: "project".to_owned(),
        name: name.to_owned(),
        key: key.map(str::to_owned),
        aliases: vec![],
        members: None,
    }
}

async fn import_creates_updates_and_retires_places(db: TestDb) {
    let s = &db.store;
    let first = [
        place("p1", "Payments", Some("PAY")),
        place("p2", "Search", None),
    ];
    let figures = s.put_places(&first, "cli").await.unwrap();
    assert_eq!(
        figures,
        PlaceFigures {
            created: 2,
            ..Default::default()
        }
    );
    let again = s.put_places(&first, "cli").await.unwrap();
    assert_eq!(
        again,
        PlaceFigures {
            unchanged: 2,
            ..Default::default()
        }
    );
    let second = [place("p1", "Payments Platform", Some("PAY"))];
    let figures = s.put_places(&second, "cli").await.unwrap();
    assert_eq!(
        figures,
        PlaceFigures {
            updated: 1,
            retired: 1,
            ..Default::default()
        }
    );
    let places = s.list_places().await.unwrap();
    assert_eq!(places.len(), 2, "retired, not deleted");
    assert_eq!(places[0].name, "Payments Platform");
    assert!(!places[0].is_retired());
    assert!(places[1].is_retired());
    assert!(places[1].retired_at.is_some());
    // Listing it again brings it back.
    let back = s.put_places(&first, "cli").await.unwrap();
    assert_eq!((back.updated, back.retired), (2, 0));
    assert!(
        s.list_places()
            .await
            .unwrap()
            .iter()
            .all(|p| !p.is_retired())
    );
    assert_eq!(s.list_audit(1).await.unwrap()[0].action, "places.import");
}

async fn a_changed_key_keeps_the_old_key_retired(db: TestDb) {
    let s = &db.store;
    let mut p = place("p1", "Payments", Some(" pay "));
    p.aliases = vec!["Pay-Ments Team".to_owned()];
    s.put_places(std::slice::from_ref(&p), "cli").await.unwrap();
    p.key = Some("PAYM".to_owned());
    s.put_places(&[p], "cli").await.unwrap();
    let aliases: Vec<(PlaceAliasKind, String, bool)> = s
        .list_place_aliases()
        .await
        .unwrap()
        .into_iter()
        .map(|a| (a.kind, a.value, a.valid_to.is_some()))
        .collect();
    assert_eq!(
        aliases,
        [
            (PlaceAliasKind::Key, "PAY".to_owned(), true),
            (PlaceAliasKind::Name, "paymentsteam".to_owned(), false),
            (PlaceAliasKind::Key, "PAYM".to_owned(), false),
        ]
    );
    assert_eq!(
        s.list_places().await.unwrap()[0].key.as_deref(),
        Some("PAYM")
    );
}

async fn invalid_imports_change_nothing(db: TestDb) {
    let s = &db.store;
    let mut bad_kind = place("p1", "Payments", None);
    bad_kind.kind = "galaxy".to_owned();
    let twice = [place("p1", "A", None), place("p1", "B", None)];
    let empty_name = [place("p1", "  ", None)];
    for bad in [vec![bad_kind], twice.to_vec(), empty_name.to_vec()] {
        let r = s.put_places(&bad, "cli").await;
        assert!(matches!(r, Err(RegistryError::Invalid { .. })), "{r:?}");
    }
    assert!(s.list_places().await.unwrap().is_empty());
}
