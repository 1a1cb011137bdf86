//! `cmcp-discovery health`: ask a running process whether it is alive. The
//! container HEALTHCHECK and exec probes call it, so it needs no shell, no
//! configuration and no store: one GET, 2xx is healthy.

use std::time::Duration;

use anyhow::{Context, Result, bail};

/// GET `url`; Ok on a 2xx answer, an error naming the status otherwise.
pub async fn run(url: &str) -> Result<()> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .context("cannot build the HTTP client")?;
    let response = client
        .get(url)
        .send()
        .await
        .with_context(|| format!("unhealthy: no answer from {url}"))?;
    let status = response.status();
    if !status.is_success() {
        bail!("unhealthy: {url} answered {status}");
    }
    println!("healthy: {url} answered {status}");
    Ok(())
}
