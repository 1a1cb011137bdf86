//! Helpers shared by the integration tests.

use std::time::Duration;

use cmcp_connectors::{Connector, HttpConfig, ListingReport, Result};
use cmcp_domain::SpaceRecord;
use tokio::sync::mpsc;

/// Fast retries and short rate-limit waits, so fault tests stay quick.
pub fn fast_cfg() -> HttpConfig {
    HttpConfig {
        timeout: Duration::from_secs(10),
        backoff_min: Duration::from_millis(5),
        backoff_max: Duration::from_millis(100),
        secondary_limit_min_wait: Duration::from_millis(50),
        ..HttpConfig::default()
    }
}

/// What one listing produced: the report (or error) and every batch the
/// sink received, in order.
pub struct Listed {
    pub result: Result<ListingReport>,
    pub batches: Vec<Vec<SpaceRecord>>,
}

impl Listed {
    pub fn records(&self) -> Vec<&SpaceRecord> {
        self.batches.iter().flatten().collect()
    }
}

/// Runs `list` with a small channel (so the listing really streams) and
/// collects what arrives.
pub async fn list(connector: &dyn Connector) -> Listed {
    let (tx, mut rx) = mpsc::channel(2);
    let collector = tokio::spawn(async move {
        let mut batches = Vec::new();
        while let Some(batch) = rx.recv().await {
            batches.push(batch);
        }
        batches
    });
    let result = connector.list(tx).await;
    let batches = collector.await.expect("collector task");
    Listed { result, batches }
}

/// One scripted answer: status line (`"200 OK"`), extra headers, body.
pub type Answer = (&'static str, Vec<(&'static str, String)>, String);

/// A loopback HTTP/1.1 server that answers with a fixed script, one
/// response per connection (each says `Connection: close`), and records the
/// request heads it saw. For the cases the simulator does not produce.
pub struct Scripted {
    pub base_url: String,
    requests: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Scripted {
    /// Answers `responses` in order; once the script
    /// is used up every further request gets a 500.
    pub async fn start(responses: Vec<Answer>) -> Scripted {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let requests = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = requests.clone();
        tokio::spawn(async move {
            let mut script = responses.into_iter();
            loop {
                let Ok((mut sock, _)) = listener.accept().await else {
                    return;
                };
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                seen.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&head).into_owned());
                let (status, headers, body) = script.next().unwrap_or((
                    "500 Internal Server Error",
                    Vec::new(),
                    "{\"message\":\"script exhausted\"}".into(),
                ));
                let mut out = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
                    body.len()
                );
                for (k, v) in headers {
                    out.push_str(&format!("{k}: {v}\r\n"));
                }
                out.push_str("\r\n");
                out.push_str(&body);
                let _ = sock.write_all(out.as_bytes()).await;
                let _ = sock.shutdown().await;
            }
        });
        Scripted { base_url, requests }
    }

    /// The request heads received so far, in order.
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}
