//! The project listing: `project/search` over live, archived and deleted
//! projects, read to Jira's own end marker.
//!
//! The first page gives `total` and the `maxResults` Jira really uses. The
//! total is a hint, not the truth (an independent double served 30 more
//! projects than it reported, and 30 fewer): it plans which `startAt`
//! windows are read a few at a time, generated lazily and no longer once a
//! window meets the end (`isLast`, or an empty page). If the planned
//! windows end before the end marker, the listing goes on past the total,
//! one window at a time, until it is met. Only then is it judged
//! ([`Tally`]): a total that moved between pages (a project added or
//! deleted mid-listing shifts the offsets) or a count that is not the
//! reported total make it partial, and the registry marks nothing missing
//! on its evidence; a project served twice makes the run partial too (the
//! registry finds it). Every project read is still sent.
//! Errors of the whole run are returned.

use std::sync::atomic::{AtomicBool, Ordering};

use cmcp_domain::{SpaceAddress, SpaceRecord};
use futures::StreamExt;
use tokio::sync::mpsc::Sender;
use url::Url;

use super::{CONCURRENT_WINDOWS, JiraConnector, MAX_RESULTS, PLATFORM, mapping, model};
use crate::ListingReport;
use crate::common::http::{Counters, Exhausted};
use crate::common::tally::Tally;
use crate::error::{ConnectorError, Result};

/// The largest Jira site the fleet plans for (`DESIGN.md`: 100,000 per
/// tenant). A total above it is not believed: it would plan windows for
/// hours of requests.
pub const MAX_PROJECTS_PER_SITE: u64 = 100_000;

/// What reading one window `[start, end)` gave.
struct Window {
    start: u64,
    records: Vec<SpaceRecord>,
    failures: Vec<String>,
    /// Items served (refused ones included).
    served: usize,
    /// `(startAt, total)` of every page that reported a total.
    totals: Vec<(u64, u64)>,
    /// Where Jira's end marker (`isLast`, or an empty page) was met.
    end_at: Option<u64>,
    /// A page could not be read: the window stopped there.
    broken: bool,
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

    /// Maps a page's items; a project that cannot be mapped (a malformed
    /// id) is refused with its reason.
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

    /// A window that has read nothing yet.
    fn empty_window(start: u64) -> Window {
        Window {
            start,
            records: Vec::new(),
            failures: Vec::new(),
            served: 0,
            totals: Vec::new(),
            end_at: None,
            broken: false,
        }
    }

    /// Adds page `page` (asked at `cur`, keeping at most `room` items) to
    /// `w`; returns how many items it served.
    fn add_page(
        &self,
        w: &mut Window,
        cur: u64,
        room: u64,
        page: model::Page,
        cloud_id: &str,
    ) -> u64 {
        if let Some(t) = page.total {
            w.totals.push((cur, t));
        }
        let got = page.values.len() as u64;
        let mut values = page.values;
        values.truncate(got.min(room) as usize);
        w.served += values.len();
        let (r, f) = self.map_values(values, cloud_id, cur);
        w.records.extend(r);
        w.failures.extend(f);
        if got == 0 || page.is_last == Some(true) {
            w.end_at = Some(cur + got);
        }
        got
    }

    /// Reads `[start, end)`, asking again from where an answer stopped
    /// short, until the window is full or Jira's end marker is met.
    async fn window(
        &self,
        start: u64,
        end: u64,
        cloud_id: &str,
        counters: &Counters,
    ) -> Result<Window> {
        let mut w = Self::empty_window(start);
        let mut cur = start;
        while cur < end && w.end_at.is_none() {
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
                    w.failures
                        .push(format!("startAt={cur}: {error} after {attempts} attempts"));
                    w.broken = true;
                    return Ok(w);
                }
            };
            cur += self.add_page(&mut w, cur, end - cur, page, cloud_id);
        }
        Ok(w)
    }

    /// Folds a window into the listing; returns whether it met the end.
    async fn take(
        &self,
        w: Window,
        tally: &mut Tally,
        end_seen: &mut u64,
        sink: &Sender<Vec<SpaceRecord>>,
    ) -> Result<bool> {
        for (at, total) in &w.totals {
            tally.reported_total(*total, &format!("startAt={at}"));
        }
        tally.served(w.served);
        if w.start >= *end_seen && w.served > 0 {
            tally.fail(format!(
                "startAt={}: projects served after Jira's end marker",
                w.start
            ));
        }
        if let Some(at) = w.end_at {
            *end_seen = (*end_seen).min(at);
        }
        for f in w.failures {
            tally.fail(f);
        }
        tally.passed(w.records.len());
        send(sink, w.records).await?;
        Ok(w.end_at.is_some())
    }

    pub(super) async fn list_inner(
        &self,
        sink: &Sender<Vec<SpaceRecord>>,
        counters: &Counters,
    ) -> Result<ListingReport> {
        let cloud_id = self.cloud_id(counters).await?;
        let cloud = cloud_id.as_str();
        let mut tally = Tally::new("projects");
        // The first page is the run: if it cannot be read, nothing was.
        let page = self.fetch(0, counters).await.map_err(|ex| ex.error)?;
        // Windows are sized by the `maxResults` Jira used, not the one asked.
        let step = if page.max_results > 0 {
            page.max_results
        } else {
            (page.values.len() as u64).max(1)
        };
        let mut first = Self::empty_window(0);
        let got = self.add_page(&mut first, 0, u64::MAX, page, cloud);
        let reported = first.totals.first().map_or(got, |(_, t)| *t);
        if reported > MAX_PROJECTS_PER_SITE {
            tally.fail(format!(
                "startAt=0: a total of {reported} projects is above the sanity cap of \
                 {MAX_PROJECTS_PER_SITE}; windows planned up to the cap only"
            ));
        }
        // Windows are planned (lazily) up to the total, never past the cap.
        let hint = reported.min(MAX_PROJECTS_PER_SITE);
        // Where the end marker was met (u64::MAX: not yet).
        let mut end_seen = u64::MAX;
        let mut broken = false;
        let mut reached_end = self.take(first, &mut tally, &mut end_seen, sink).await?;

        // Windows start where the first page stopped: it may have stopped
        // short of `step` (Jira caps `maxResults`), so the first window is
        // the rest of it.
        let next_start = |s: u64| if s < step { step } else { s + step };
        let mut resume = got;
        if !reached_end && got > 0 {
            let stop = AtomicBool::new(false);
            let starts =
                futures::stream::iter(std::iter::successors(Some(got), |&s| Some(next_start(s))))
                    .take_while(|&s| std::future::ready(s < hint && !stop.load(Ordering::SeqCst)));
            let mut windows = starts
                .map(|s| self.window(s, next_start(s), cloud, counters))
                .buffered(CONCURRENT_WINDOWS);
            while let Some(w) = windows.next().await {
                let w = w?;
                resume = resume.max(next_start(w.start));
                broken |= w.broken;
                if self.take(w, &mut tally, &mut end_seen, sink).await? {
                    reached_end = true;
                }
                if reached_end || broken {
                    stop.store(true, Ordering::SeqCst);
                }
            }
        }
        // The planned windows ended before Jira's end marker (a total too
        // low): read on, one window at a time, until it is met. Each window
        // must bring projects, and not the very ones of the window before,
        // so a server repeating itself cannot keep the listing going (the
        // sanity cap bounds any other loop).
        let mut previous: Vec<SpaceAddress> = Vec::new();
        while !reached_end && !broken {
            if resume >= MAX_PROJECTS_PER_SITE {
                tally.fail(format!(
                    "startAt={resume}: no end marker within the sanity cap of \
                     {MAX_PROJECTS_PER_SITE} projects; stopped reading"
                ));
                break;
            }
            let w = self
                .window(resume, next_start(resume), cloud, counters)
                .await?;
            resume = next_start(w.start);
            broken |= w.broken;
            let these: Vec<SpaceAddress> = w.records.iter().map(|r| r.address.clone()).collect();
            let nothing_new = these.is_empty() || these == previous;
            previous = these;
            reached_end = self.take(w, &mut tally, &mut end_seen, sink).await?;
            if !reached_end && nothing_new {
                tally.fail(format!(
                    "startAt={resume}: no new projects and no end marker; stopped reading"
                ));
                break;
            }
        }

        let projects = tally.admitted();
        let failures = tally.finish(reached_end && !broken);
        for why in &failures {
            tracing::warn!(why = %why, "project listing does not add up; listing is partial");
        }
        let report = ListingReport {
            complete: failures.is_empty(),
            figures: counters.figures(),
            failures,
            risks: Vec::new(),
            skipped_foreign: 0,
        };
        tracing::info!(
            pages = report.figures.pages,
            projects,
            total = hint,
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
