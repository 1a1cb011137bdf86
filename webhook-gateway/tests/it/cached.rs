//! The gateway's copy of a connection and its group commit, through the
//! real router on both backends: a copy never lets in what the store would
//! refuse (a connection disabled or a secret ended by another process), a
//! secret added elsewhere is taken at once, and deliveries committed
//! together each get their own answer.

use axum::http::StatusCode;
use cmcp_domain::ConnectionStatus;
use cmcp_registry::testing::{TestDb, cipher};
use futures::future::join_all;

use crate::hooks::{app, deliveries_and_jobs, github, post, ready, replay};

both_backends!(
    a_connection_disabled_elsewhere_gets_no_delivery_stored,
    a_secret_rotated_elsewhere_is_taken_at_once,
    deliveries_committed_together_each_get_their_answer,
);

/// The gateway has the connection in its cache when another process
/// disables it: the next delivery is refused with the 401 of an unknown
/// connection and nothing is stored; enabled again, it is taken at once.
pub async fn a_connection_disabled_elsewhere_gets_no_delivery_stored(db: TestDb) {
    let secret = ready(&db).await;
    let app = app(&db.store, 1 << 20);
    assert_eq!(
        post(&app, "/hooks/github/gh", &github(&secret, "d1")).await,
        StatusCode::ACCEPTED
    );
    db.store
        .set_connection_status("gh", ConnectionStatus::Disabled, "elsewhere", None)
        .await
        .unwrap();
    for guid in ["d2", "d3"] {
        assert_eq!(
            post(&app, "/hooks/github/gh", &github(&secret, guid)).await,
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(deliveries_and_jobs(&db.store, "gh").await, (1, 1));
    db.store
        .set_connection_status("gh", ConnectionStatus::Enabled, "elsewhere", None)
        .await
        .unwrap();
    assert_eq!(
        post(&app, "/hooks/github/gh", &github(&secret, "d4")).await,
        StatusCode::ACCEPTED
    );
    assert_eq!(deliveries_and_jobs(&db.store, "gh").await, (2, 2));
}

/// Another process rotates the secret while this gateway holds the old
/// one: the platform's next delivery, signed with the new secret, is
/// accepted (the connection is read again before a refusal), and the old
/// secret stays good for its overlap only.
pub async fn a_secret_rotated_elsewhere_is_taken_at_once(db: TestDb) {
    let old = ready(&db).await;
    let app = app(&db.store, 1 << 20);
    assert_eq!(
        post(&app, "/hooks/github/gh", &github(&old, "r1")).await,
        StatusCode::ACCEPTED
    );
    db.store
        .rotate_webhook_secret(&cipher(), "gh", 3_600_000, "elsewhere")
        .await
        .unwrap();
    let new = db
        .store
        .current_webhook_secret(&cipher(), "gh")
        .await
        .unwrap();
    assert_eq!(
        post(&app, "/hooks/github/gh", &github(new.expose(), "r2")).await,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        post(&app, "/hooks/github/gh", &github(&old, "r3")).await,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        post(&app, "/hooks/github/gh", &github("a forgery", "r4")).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(deliveries_and_jobs(&db.store, "gh").await, (3, 3));
}

/// Many deliveries at once, among them copies and replays of each other:
/// whatever batches the writer forms, every new delivery is 202 with one
/// row named by one job, every copy or replay 200 with neither.
pub async fn deliveries_committed_together_each_get_their_answer(db: TestDb) {
    let secret = ready(&db).await;
    let app = app(&db.store, 1 << 20);
    let mut sent = Vec::new();
    for i in 0..24 {
        let guid = format!("c{i}");
        sent.push((github(&secret, &guid), StatusCode::ACCEPTED));
        if i % 4 == 0 {
            sent.push((github(&secret, &guid), StatusCode::OK));
            sent.push((
                replay(&secret, &guid, &format!("{guid}-again")),
                StatusCode::OK,
            ));
        }
    }
    // The first of each pair must be stored before its copy is sent for
    // the expected answers to be fixed: send the originals all at once,
    // then the copies all at once.
    let (copies, originals): (Vec<_>, Vec<_>) =
        sent.iter().partition(|(_, want)| *want == StatusCode::OK);
    for wave in [originals, copies] {
        let answers = join_all(wave.iter().map(|(d, _)| post(&app, "/hooks/github/gh", d))).await;
        for ((_, want), got) in wave.iter().zip(answers) {
            assert_eq!(got, *want);
        }
    }
    assert_eq!(deliveries_and_jobs(&db.store, "gh").await, (24, 24));
}
