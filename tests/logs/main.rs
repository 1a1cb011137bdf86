//! Trace-level logs never carry a token. This binary installs one global
//! subscriber at TRACE (every thread, every crate, `log` records included)
//! that writes into memory, runs syncs with faults and a refused token on
//! both backends, and searches everything that was logged.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use cmcp_domain::Owner;
use cmcp_fixtures::{Faults, GithubSimConfig};
use cmcp_registry::testing::TestDb;
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
