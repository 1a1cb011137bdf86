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
