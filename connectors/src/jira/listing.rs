//! The project listing: `project/search` over live, archived and deleted
//! projects. The first page gives `total` and the `maxResults` Jira really
//! uses; the remaining `startAt` windows are then read a few at a time. A
//! window that fails, a `total` that moves, an empty page or `isLast` before
//! the total make the listing partial; errors of the whole run are returned.

use cmcp_domain::SpaceRecord;
use futures::StreamExt;
use tokio::sync::mpsc::Sender;
use url::Url;

use super::{CONCURRENT_WINDOWS, JiraConnector, MAX_RESULTS, PLATFORM, mapping, model};
use crate::ListingReport;
use crate::common::http::{Counters, Exhausted};
use crate::error::{ConnectorError, Result};

/// What reading one window gave.
enum Window {
    Records(Vec<SpaceRecord>, Vec<String>),
    Failed(String),
}

impl JiraConnector {
    fn search_url(&self, start_at: u64, max_results: u64) -> Url {
        let mut url = self
            .client
            .endpoint(&["rest", "api", "3", "project", "search"]);
        url.query_pairs_mut()
            .append_pair("expand", "projectKeys")
            .append_pair("status", "live")
            .append_pair("status", "archived")
            .append_pair("status", "deleted")
            .append_pair("startAt", &start_at.to_string())
            .append_pair("maxResults", &max_results.to_string());
        url
    }

    fn asked(&self) -> u64 {
        u64::from(self.client.http().config().per_page.min(MAX_RESULTS))
    }

    async fn fetch(
        &self,
        start_at: u64,
        counters: &Counters,
    ) -> std::result::Result<model::Page, Exhausted> {
        let url = self.search_url(start_at, self.asked());
        let page = self
            .client
            .http()
            .get_json::<model::Page>(&url, counters)
            .await?;
        counters.page();
        Ok(page.value)
    }

    fn map_values(
        &self,
        values: Vec<serde_json::Value>,
        cloud_id: &str,
        start: u64,
    ) -> (Vec<SpaceRecord>, Vec<String>) {
        let mut records = Vec::with_capacity(values.len());
        let mut failures = Vec::new();
        for (i, item) in values.into_iter().enumerate() {
            match serde_json::from_value::<model::Project>(item)
                .map_err(|e| e.to_string())
                .and_then(|p| {
                    mapping::project_record(&p, cloud_id, &self.site).map_err(|e| e.to_string())
                }) {
                Ok(r) => records.push(r),
                Err(e) => failures.push(format!("item {}: {e}", start + i as u64)),
            }
        }
        (records, failures)
    }

    /// Reads `[start, end)`, asking again from where an answer stopped short.
    async fn window(
        &self,
        start: u64,
        end: u64,
        total: u64,
        cloud_id: &str,
        counters: &Counters,
    ) -> Result<Window> {
        let mut cur = start;
        let mut records = Vec::new();
        let mut failures = Vec::new();
        while cur < end {
            let page = match self.fetch(cur, counters).await {
                Ok(p) => p,
                Err(Exhausted { error, attempts }) => {
                    if matches!(
                        error,
                        ConnectorError::RateLimited { .. }
                            | ConnectorError::Unauthorized { .. }
                            | ConnectorError::PermissionDenied { .. }
                    ) {
                        return Err(error);
                    }
                    return Ok(Window::Failed(format!(
                        "startAt={cur}: {error} after {attempts} attempts"
                    )));
                }
            };
            if page.total.is_some_and(|t| t != total) {
                return Ok(Window::Failed(format!(
                    "startAt={cur}: the project count moved from {total} to {} during the listing",
                    page.total.unwrap_or_default()
                )));
            }
            let got = page.values.len() as u64;
            let keep = got.min(end - cur) as usize;
            let mut values = page.values;
            values.truncate(keep);
            let (r, f) = self.map_values(values, cloud_id, cur);
            records.extend(r);
            failures.extend(f);
            cur += got;
            if got == 0 {
                if cur < end {
                    return Ok(Window::Failed(format!(
                        "startAt={cur}: an empty page before the end ({total} projects)"
                    )));
                }
                break;
            }
            if page.is_last == Some(true) && cur < end {
                return Ok(Window::Failed(format!(
                    "startAt={cur}: isLast before the reported total {total}"
                )));
            }
        }
        Ok(Window::Records(records, failures))
    }

    pub(super) async fn list_inner(
        &self,
        sink: &Sender<Vec<SpaceRecord>>,
        counters: &Counters,
    ) -> Result<ListingReport> {
        let cloud_id = self.cloud_id(counters).await?;
        let first = self.fetch(0, counters).await.map_err(|ex| ex.error)?;
        let mut failures = Vec::new();
        let got = first.values.len() as u64;
        let total = first.total.unwrap_or(got);
        let step = if first.max_results > 0 {
            first.max_results
        } else {
            got.max(1)
        };
        let (records, f) = self.map_values(first.values, &cloud_id, 0);
        failures.extend(f);
        let mut items = records.len() as u64;
        send(sink, records).await?;

        if first.is_last != Some(true) && got < total {
            // The rest of the first window (if the first page stopped short),
            // then every further window of `step` items.
            let mut windows = Vec::new();
            let mut start = got;
            let first_end = step.min(total);
            if start < first_end {
                windows.push((start, first_end));
                start = first_end;
            }
            while start < total {
                windows.push((start, (start + step).min(total)));
                start += step;
            }
            let cloud = cloud_id.as_str();
            let mut stream = futures::stream::iter(windows)
                .map(|(s, e)| self.window(s, e, total, cloud, counters))
                .buffered(CONCURRENT_WINDOWS);
            while let Some(w) = stream.next().await {
                match w? {
                    Window::Records(records, f) => {
                        failures.extend(f);
                        items += records.len() as u64;
                        send(sink, records).await?;
                    }
                    Window::Failed(why) => {
                        tracing::warn!(why = %why, "listing window failed; listing is partial");
                        failures.push(why);
                    }
                }
            }
        }

        let report = ListingReport {
            complete: failures.is_empty(),
            figures: counters.figures(),
            failures,
            risks: Vec::new(),
        };
        tracing::info!(
            pages = report.figures.pages,
            projects = items,
            total,
            requests = report.figures.requests,
            retries = report.figures.retries,
            complete = report.complete,
            "listing finished"
        );
        Ok(report)
    }
}

async fn send(sink: &Sender<Vec<SpaceRecord>>, records: Vec<SpaceRecord>) -> Result<()> {
    if records.is_empty() {
        return Ok(());
    }
    sink.send(records)
        .await
        .map_err(|_| ConnectorError::SinkClosed { platform: PLATFORM })
}
