//! Trace-level logs never carry a token. This binary installs one global
//! subscriber at TRACE (every thread, every crate, `log` records included)
//! that writes into memory, runs syncs with faults and a refused token on
//! both backends, and searches everything that was logged. It also reads
//! there what an operator is told of a round of mapping proposals stuck
//! behind another.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use cmcp_domain::Owner;
use cmcp_fixtures::{Faults, GithubSimConfig};
use cmcp_registry::testing::{AnotherRound, TestDb};
use cmcp_tests::{CONNECTION, Harness, TOKEN, assert_database_has_no_token, fast_http};
use cmcp_worker::{SyncOutcome, run_sync};

/// A `MakeWriter` that keeps everything in memory.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("capture lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Capture {
    type Writer = Capture;
    fn make_writer(&'a self) -> Capture {
        self.clone()
    }
}

impl Capture {
    /// What was logged after the first `from` bytes.
    fn since(&self, from: usize) -> String {
        let logs = self.0.lock().expect("capture lock");
        String::from_utf8_lossy(&logs[from.min(logs.len())..]).into_owned()
    }

    fn len(&self) -> usize {
        self.0.lock().expect("capture lock").len()
    }
}

fn capture() -> &'static Capture {
    static CAPTURE: OnceLock<Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let capture = Capture::default();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(capture.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("one global subscriber");
        tracing_log::LogTracer::init().expect("log bridge");
        capture
    })
}

async fn trace_logs_never_contain_the_token(db: TestDb) {
    let capture = capture();
    let faults = Faults {
        server_error: 0.1,
        drop_connection: 0.05,
        ..Faults::default()
    };
    let h = Harness::start(
        db,
        GithubSimConfig {
            repos: 60,
            faults,
            ..GithubSimConfig::default()
        },
        fast_http(),
    )
    .await;
    let token = h
        .store()
        .connection_token(&h.ctx.cipher, CONNECTION)
        .await
        .unwrap();
    tracing::debug!(?token, %token, "a careless log line");
    let synced = run_sync(&h.ctx, CONNECTION, cmcp_domain::RunTrigger::Test)
        .await
        .unwrap();
    assert!(matches!(synced, SyncOutcome::Complete { .. }), "{synced:?}");
    // A connection whose token the upstream refuses: the 401 path logs too.
    let other = cmcp_fixtures::GithubSim::start(GithubSimConfig {
        repos: 3,
        token: Some("another".into()),
        ..GithubSimConfig::default()
    })
    .await
    .unwrap();
    cmcp_tests::add_connection(
        h.store(),
        "github-refused",
        &other.base_url(),
        Owner::Company,
    )
    .await;
    let refused = run_sync(&h.ctx, "github-refused", cmcp_domain::RunTrigger::Test)
        .await
        .unwrap();
    assert!(matches!(refused, SyncOutcome::Failed { .. }), "{refused:?}");
    assert_database_has_no_token(h.store(), &h.db.url).await;
    let logs = String::from_utf8_lossy(&capture.0.lock().unwrap()).into_owned();
    assert!(
        logs.len() > 1_000 && logs.contains("TRACE"),
        "trace logs were captured ({} bytes)",
        logs.len()
    );
    assert!(
        logs.contains("[redacted]"),
        "the careless line printed the redaction marker"
    );
    assert!(!logs.contains(TOKEN), "the token leaked into the logs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_logs_never_contain_the_token_sqlite() {
    trace_logs_never_contain_the_token(TestDb::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_logs_never_contain_the_token_postgres() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    trace_logs_never_contain_the_token(db).await;
}

/// A round of mapping proposals waiting for its turn behind another
/// process's says so after the warning's delay, again after each as long,
/// and once more when it takes the turn; it still waits, and then runs.
/// One backend after the other in one test, so that each reads only its
/// own lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_stuck_behind_another_says_so_and_still_waits() {
    let capture = capture();
    cmcp_registry::testing::matching_wait_warning_after(Duration::from_millis(100));
    let mut dbs = vec![TestDb::sqlite().await];
    dbs.extend(TestDb::postgres().await);
    for db in dbs {
        let backend = format!("{:?}", db.store.backend());
        let from = capture.len();
        let other = AnotherRound::begin(&db).await;
        let store = db.store.clone();
        let round = tokio::spawn(async move {
            cmcp_matching::refresh_proposals(&store, &Default::default()).await
        });
        tokio::time::sleep(Duration::from_millis(450)).await;
        let waiting = capture.since(from);
        let warnings = waiting.matches("still waiting for its turn").count();
        // Again after each delay: more than once (a busy machine may fire
        // them late, never fewer).
        assert!(
            warnings >= 2,
            "{backend}: {warnings} warnings in 450 ms of waiting:\n{waiting}"
        );
        assert!(waiting.contains("WARN"), "{backend}: logged as a warning");
        assert!(!round.is_finished(), "{backend}: the round waits on");
        other.end().await;
        round
            .await
            .expect("the round's task")
            .expect("the round ran once its turn came");
        let all = capture.since(from);
        assert!(
            all.contains("took its turn after a long wait"),
            "{backend}: the end of the wait is logged:\n{all}"
        );
        // A round that finds the turn free says nothing of waiting.
        let from = capture.len();
        cmcp_matching::refresh_proposals(&db.store, &Default::default())
            .await
            .expect("a round");
        assert!(
            !capture.since(from).contains("its turn"),
            "{backend}: a free turn is not a wait"
        );
    }
}
