//! Drive's push channels (token sealed, live until stopped or expired) and
//! changes-feed positions (one per drive, advanced, forgotten).

use cmcp_domain::{Owner, Token};
use cmcp_registry::NewDriveChannel;
use cmcp_registry::testing::{TestDb, cipher};

use crate::support::{add_connection, now_ms};

both_backends!(
    a_channel_is_live_until_stopped_or_expired,
    page_tokens_advance_per_drive_and_are_forgotten,
);

const HOUR_MS: i64 = 3_600_000;

async fn a_channel_is_live_until_stopped_or_expired(db: TestDb) {
    let s = &db.store;
    add_connection(s, "drive", Owner::Company).await;
    add_connection(s, "other", Owner::Company).await;
    let token = Token::new("channel-token-secret-1");
    for (channel, expiration) in [("ch-1", now_ms() + HOUR_MS), ("ch-old", now_ms() - 1)] {
        s.insert_drive_channel(
            &cipher(),
            &NewDriveChannel {
                connection_id: "drive",
                drive_id: Some("0AD1"),
                channel_id: channel,
                token: &token,
                resource_id: "res-1",
                expiration,
            },
        )
        .await
        .unwrap();
    }
    let (row, opened) = s
        .live_drive_channel(&cipher(), "drive", "ch-1")
        .await
        .unwrap()
        .expect("a live channel");
    assert_eq!(opened.expose(), token.expose());
    assert_eq!(
        (row.drive_id.as_deref(), row.resource_id.as_str()),
        (Some("0AD1"), "res-1")
    );
    assert!(row.is_live(now_ms()));
    assert!(!format!("{row:?}").contains("channel-token-secret"));
    assert!(
        s.live_drive_channel(&cipher(), "drive", "ch-old")
            .await
            .unwrap()
            .is_none(),
        "expired"
    );
    assert!(
        s.live_drive_channel(&cipher(), "other", "ch-1")
            .await
            .unwrap()
            .is_none(),
        "another connection's channel"
    );
    let unstopped: Vec<String> = s
        .unstopped_drive_channels("drive")
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.channel_id)
        .collect();
    assert_eq!(unstopped, ["ch-1", "ch-old"], "newest expiration first");
    assert!(s.stop_drive_channel("drive", "ch-1").await.unwrap());
    assert!(
        !s.stop_drive_channel("drive", "ch-1").await.unwrap(),
        "once"
    );
    assert!(
        s.live_drive_channel(&cipher(), "drive", "ch-1")
            .await
            .unwrap()
            .is_none(),
        "stopped"
    );
    let all = s.drive_channels("drive").await.unwrap();
    assert_eq!(all.len(), 2, "stopped channels are kept");
    assert!(all.iter().any(|c| c.stopped_at.is_some()));
}

async fn page_tokens_advance_per_drive_and_are_forgotten(db: TestDb) {
    let s = &db.store;
    add_connection(s, "drive", Owner::Company).await;
    add_connection(s, "other", Owner::Company).await;
    let positions = |v: Vec<cmcp_registry::DrivePageToken>| -> Vec<(String, String)> {
        v.into_iter().map(|t| (t.drive_id, t.page_token)).collect()
    };
    s.set_drive_page_tokens(
        "drive",
        &[("0AD2".into(), "100".into()), ("0AD1".into(), "7".into())],
    )
    .await
    .unwrap();
    s.set_drive_page_token("drive", "0AD1", "8").await.unwrap();
    s.set_drive_page_token("other", "0AD1", "1").await.unwrap();
    assert_eq!(
        positions(s.drive_page_tokens("drive").await.unwrap()),
        [("0AD1".into(), "8".into()), ("0AD2".into(), "100".into())]
    );
    assert!(s.delete_drive_page_token("drive", "0AD2").await.unwrap());
    assert!(!s.delete_drive_page_token("drive", "0AD2").await.unwrap());
    assert_eq!(
        positions(s.drive_page_tokens("drive").await.unwrap()),
        [("0AD1".into(), "8".into())]
    );
    assert_eq!(s.drive_page_tokens("other").await.unwrap().len(), 1);
}
