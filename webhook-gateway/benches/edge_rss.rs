//! Memory and descriptors of the edge under stalled and flooding clients.
//!
//! The server runs in a child process (this binary re-run with `--serve`),
//! so its RSS (`VmRSS`) and open descriptors are its own, read from
//! `/proc/<pid>`. Two servers are measured in the same run with the same
//! router and store:
//!
//! - `reference`: `axum::serve` with no body-bytes budget, as the edge was
//!   served before (bodies buffered up to 25 MiB, no timeouts, no caps);
//! - `bounded`: `listen::serve` with the default `GatewayConfig`.
//!
//! Scenarios: 80 clients each send the head and all but one byte of a
//! 20 MiB body, then stall; 10,000 concurrent unsigned POSTs. For each the
//! peak RSS growth over the idle server, and the descriptors the server
//! still holds once its timeouts have passed.
//!
//! `cargo bench --profile dev -p cmcp-webhook-gateway --bench edge_rss`
//! (memory does not depend on optimisation; the dev profile saves a
//! release build of the whole tree)
//! Knobs: `BENCH_STALLED` (80), `BENCH_STALLED_MIB` (20), `BENCH_FLOOD`
//! (10000).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use cmcp_domain::Platform;
use cmcp_registry::testing::{TestDb, cipher, company_connection};
use cmcp_webhook_gateway::{EdgeState, GatewayConfig, Hooks, router};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if let Some(i) = args.iter().position(|a| a == "--serve") {
        let bounded = args.get(i + 1).map(String::as_str) == Some("bounded");
        rt.block_on(serve(bounded));
    } else {
        rt.block_on(drive());
    }
}

/// The child: a SQLite store with one GitHub connection `gh`, the edge on a
/// loopback port printed on stdout.
async fn serve(bounded: bool) {
    let db = TestDb::sqlite().await;
    company_connection(&db.store, "gh", Platform::Github).await;
    let mut config = GatewayConfig::default();
    if !bounded {
        config.max_inflight_body_bytes = usize::MAX;
    }
    let app = router(EdgeState {
        store: db.store.clone(),
        metrics: None,
        hooks: Some(Hooks::new(cipher(), config.clone())),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("{}", listener.local_addr().unwrap());
    if bounded {
        cmcp_webhook_gateway::listen::serve(listener, app, &config, std::future::pending())
            .await
            .unwrap();
    } else {
        axum::serve(listener, app).await.unwrap();
    }
}

struct Server {
    child: Child,
    addr: String,
}

impl Server {
    fn start(mode: &str) -> Server {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--serve", mode])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        Server {
            child,
            addr: line.trim().to_owned(),
        }
    }

    fn status_field(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }

    fn rss_mib(&self) -> f64 {
        self.status_field("VmRSS:") as f64 / 1024.0
    }

    /// Open sockets (not the database's files, whose pool grows under
    /// load).
    fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id())).map_or(0, |d| {
            d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter(|target| target.to_string_lossy().starts_with("socket:"))
                .count()
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Samples the server's RSS every 20 ms until stopped; the peak in KiB.
fn sample_peak(server: &Server, stop: Arc<AtomicUsize>) -> std::thread::JoinHandle<u64> {
    let path = format!("/proc/{}/status", server.child.id());
    std::thread::spawn(move || {
        let peak = AtomicU64::new(0);
        while stop.load(Ordering::Relaxed) == 0 {
            let kib = std::fs::read_to_string(&path)
                .unwrap_or_default()
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or(0);
            peak.fetch_max(kib, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(20));
        }
        peak.load(Ordering::Relaxed)
    })
}

fn head(length: usize) -> String {
    format!(
        "POST /hooks/github/gh HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n\
         x-github-event: repository\r\nx-github-delivery: d\r\nx-github-hook-id: 1\r\n\
         x-hub-signature-256: sha256=00\r\ncontent-length: {length}\r\n\r\n"
    )
}

struct Figures {
    growth_mib: f64,
    held_fds: usize,
    statuses: String,
}

/// 80 clients send all but one byte of a 20 MiB body, then stall (their
/// sockets stay open on the client side until the end).
async fn stalled(server: &Server, clients: usize, mib: usize, settle: Duration) -> Figures {
    let idle = server.rss_mib();
    let idle_fds = server.fds();
    let stop = Arc::new(AtomicUsize::new(0));
    let sampler = sample_peak(server, stop.clone());
    let length = mib * 1024 * 1024;
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let addr = server.addr.clone();
        tasks.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(&addr).await.ok()?;
            s.write_all(head(length).as_bytes()).await.ok()?;
            let chunk = vec![b' '; 64 * 1024];
            let mut left = length - 1;
            while left > 0 {
                let n = left.min(chunk.len());
                if s.write_all(&chunk[..n]).await.is_err() {
                    break;
                }
                left -= n;
            }
            Some(s)
        }));
    }
    let mut held = Vec::new();
    for t in tasks {
        if let Some(s) = t.await.unwrap() {
            held.push(s);
        }
    }
    tokio::time::sleep(settle).await;
    stop.store(1, Ordering::Relaxed);
    let peak = sampler.join().unwrap() as f64 / 1024.0;
    let mut codes = std::collections::BTreeMap::new();
    for s in &mut held {
        let mut buf = [0u8; 12];
        let code = match tokio::time::timeout(Duration::from_millis(50), s.read(&mut buf)).await {
            Ok(Ok(n)) if n >= 12 => String::from_utf8_lossy(&buf[9..12]).into_owned(),
            Ok(_) => "closed".to_owned(),
            Err(_) => "pending".to_owned(),
        };
        *codes.entry(code).or_insert(0usize) += 1;
    }
    let figures = Figures {
        growth_mib: peak - idle,
        held_fds: server.fds().saturating_sub(idle_fds),
        statuses: format!("{codes:?}"),
    };
    drop(held);
    figures
}

/// `n` concurrent unsigned POSTs of a small body, each waiting for its
/// answer.
async fn flood(server: &Server, n: usize, settle: Duration) -> Figures {
    let idle = server.rss_mib();
    let idle_fds = server.fds();
    let stop = Arc::new(AtomicUsize::new(0));
    let sampler = sample_peak(server, stop.clone());
    let body = vec![b'{'; 4096];
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (addr, body) = (server.addr.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let Ok(mut s) = TcpStream::connect(&addr).await else {
                return "connect".to_owned();
            };
            if s.write_all(head(body.len()).as_bytes()).await.is_err()
                || s.write_all(&body).await.is_err()
            {
                return "reset".to_owned();
            }
            let mut buf = [0u8; 12];
            match tokio::time::timeout(Duration::from_secs(30), s.read_exact(&mut buf)).await {
                Ok(Ok(_)) => String::from_utf8_lossy(&buf[9..12]).into_owned(),
                Ok(Err(_)) => "closed".to_owned(),
                Err(_) => "timeout".to_owned(),
            }
        }));
    }
    let mut codes = std::collections::BTreeMap::new();
    for t in tasks {
        *codes.entry(t.await.unwrap()).or_insert(0usize) += 1;
    }
    tokio::time::sleep(settle).await;
    stop.store(1, Ordering::Relaxed);
    let peak = sampler.join().unwrap() as f64 / 1024.0;
    Figures {
        growth_mib: peak - idle,
        held_fds: server.fds().saturating_sub(idle_fds),
        statuses: format!("{codes:?}"),
    }
}

async fn drive() {
    let clients = knob("BENCH_STALLED", 80);
    let mib = knob("BENCH_STALLED_MIB", 20);
    let n = knob("BENCH_FLOOD", 10_000);
    // Past the bounded server's header and body timeouts (10 s each).
    let settle = GatewayConfig::default().body_read_timeout + Duration::from_secs(2);
    let mut rows = Vec::new();
    for mode in ["reference", "bounded"] {
        let server = Server::start(mode);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let s = stalled(&server, clients, mib, settle).await;
        drop(server);
        let server = Server::start(mode);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let f = flood(&server, n, Duration::from_secs(1)).await;
        rows.push((mode, s, f));
    }
    println!(
        "scenario                         server      RSS growth  sockets held after  answers"
    );
    for (mode, s, f) in &rows {
        println!(
            "{:<32} {mode:<10} {:>8.1} MiB  {:>18}  {}",
            format!("{clients} stalled {mib} MiB bodies"),
            s.growth_mib,
            s.held_fds,
            s.statuses
        );
        println!(
            "{:<32} {mode:<10} {:>8.1} MiB  {:>18}  {}",
            format!("{n} concurrent unsigned POSTs"),
            f.growth_mib,
            f.held_fds,
            f.statuses
        );
    }
    let (r, b) = (&rows[0], &rows[1]);
    println!(
        "ratio bounded/reference RSS growth: stalled {:.3}, flood {:.3}",
        b.1.growth_mib / r.1.growth_mib.max(0.1),
        b.2.growth_mib / r.2.growth_mib.max(0.1)
    );
}
