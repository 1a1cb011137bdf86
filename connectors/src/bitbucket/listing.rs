//! The workspace listing: the workspace (the tenant), then its projects and
//! its repositories, each followed page by page along Bitbucket's `next`
//! links exactly as given. A page that fails after retries, a `next` off the
//! API origin or one already read ends that walk and makes the listing
//! partial; errors of the whole run (a refused credential, a rate limit) are
//! returned. Projects are read by uuid through the same walk: the API only
//! fetches a project by its key, and keys change.
//!
//! `page=N` is an offset: a repository deleted while the pages are read
//! shifts every later page, and the one after it is never served. So a walk
//! adds up before it counts as complete ([`Tally`]): an item with a
//! malformed uuid, a `size` that moves between pages, or a count at the
//! last page that is not the `size` Bitbucket reported make it partial, and
//! the registry marks nothing missing on its evidence. The same uuid twice
//! makes the run partial too; the registry finds it, as it keeps every
//! address anyway.

use std::collections::HashSet;

use cmcp_domain::{RiskNotice, SpaceAddress, SpaceRecord};
use tokio::sync::mpsc::Sender;
use url::Url;

use super::{BitbucketConnector, MAX_PAGELEN, PLATFORM, mapping, model, write_scope_risk};
use crate::common::http::{Counters, Exhausted};
use crate::common::tally::Tally;
use crate::error::{ConnectorError, Result};
use crate::{ListingReport, ReadOutcome};

impl BitbucketConnector {
    fn pagelen(&self) -> String {
        self.client
            .http()
            .config()
            .per_page
            .min(MAX_PAGELEN)
            .to_string()
    }

    pub(super) async fn send(
        &self,
        sink: &Sender<Vec<SpaceRecord>>,
        records: Vec<SpaceRecord>,
    ) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        sink.send(records)
            .await
            .map_err(|_| ConnectorError::SinkClosed { platform: PLATFORM })
    }

    pub(super) fn first_url(&self, segments: &[&str]) -> Url {
        let mut url = self.client.endpoint(segments);
        url.query_pairs_mut()
            .append_pair("pagelen", &self.pagelen());
        url
    }

    /// Follows `next` from `first`, handing each page's items to `handle`
    /// and sending what it returns to `sink` (if any), each uuid once. Page
    /// failures end the walk; they, refused items and a walk that does not
    /// add up land in `failures`; run-level errors are returned.
    #[allow(clippy::too_many_arguments)] // one call site per listing; a struct would only rename them
    pub(super) async fn walk<T, F>(
        &self,
        what: &str,
        first: Url,
        counters: &Counters,
        sink: Option<&Sender<Vec<SpaceRecord>>>,
        failures: &mut Vec<String>,
        risk: &mut Option<RiskNotice>,
        mut handle: F,
    ) -> Result<u64>
    where
        T: serde::de::DeserializeOwned,
        F: FnMut(T) -> std::result::Result<Option<SpaceRecord>, String>,
    {
        let mut seen = HashSet::new();
        let mut tally = Tally::new(what);
        let mut reached_end = false;
        let mut next = Some(first);
        let mut page = 0u32;
        while let Some(url) = next.take() {
            page += 1;
            seen.insert(url.to_string());
            let fetched = match self
                .client
                .http()
                .get_json::<model::Page<serde_json::Value>>(&url, counters)
                .await
            {
                Ok(f) => f,
                Err(Exhausted { error, attempts }) => {
                    if matches!(
                        error,
                        ConnectorError::RateLimited { .. }
                            | ConnectorError::Unauthorized { .. }
                            | ConnectorError::PermissionDenied { .. }
                    ) {
                        return Err(error);
                    }
                    tracing::warn!(what, page, attempts, error = %error, "listing page failed; listing is partial");
                    tally.fail(format!(
                        "{what} page {page}: {error} after {attempts} attempts"
                    ));
                    break;
                }
            };
            counters.page();
            if let Some(r) = write_scope_risk(&fetched.headers) {
                *risk = Some(r);
            }
            let at = format!("{what} page {page}");
            // `size` is optional ("can be expensive to compute"); when sent,
            // it must hold for the whole walk.
            if let Some(size) = fetched.value.rest.get("size").and_then(|v| v.as_u64()) {
                tally.reported_total(size, &at);
            }
            tally.served(fetched.value.values.len());
            let mut records = Vec::with_capacity(fetched.value.values.len());
            for (i, item) in fetched.value.values.into_iter().enumerate() {
                match serde_json::from_value::<T>(item)
                    .map_err(|e| e.to_string())
                    .and_then(&mut handle)
                {
                    Ok(Some(r)) => records.push(r),
                    Ok(None) => {}
                    Err(e) => tally.fail(format!("{at}: item {}: {e}", i + 1)),
                }
            }
            tally.passed(records.len());
            if let Some(sink) = sink {
                self.send(sink, records).await?;
            }
            next = match fetched.value.next.as_deref().map(|n| fetched.url.join(n)) {
                None => {
                    reached_end = true;
                    None
                }
                Some(Err(e)) => {
                    tally.fail(format!("{at}: unparsable next URL: {e}"));
                    None
                }
                Some(Ok(n)) if !self.client.same_origin(&n) => {
                    let error = ConnectorError::Pagination {
                        platform: PLATFORM,
                        url: n.to_string(),
                        why: "not on the API origin".into(),
                    };
                    tally.fail(format!("{at}: {error}"));
                    None
                }
                Some(Ok(n)) if seen.contains(n.as_str()) => {
                    let error = ConnectorError::Pagination {
                        platform: PLATFORM,
                        url: n.to_string(),
                        why: "that page was already read (pagination loop)".into(),
                    };
                    tally.fail(format!("{at}: {error}"));
                    None
                }
                Some(Ok(n)) => Some(n),
            };
        }
        let items = tally.admitted();
        let walk_failures = tally.finish(reached_end);
        for why in &walk_failures {
            tracing::warn!(what, why = %why, "listing does not add up; listing is partial");
        }
        failures.extend(walk_failures);
        Ok(items)
    }

    pub(super) async fn list_inner(
        &self,
        sink: &Sender<Vec<SpaceRecord>>,
        counters: &Counters,
    ) -> Result<ListingReport> {
        let (ws, mut risk) = self.read_workspace(counters).await?;
        let tenant = ws.address.tenant().to_owned();
        self.send(sink, vec![ws]).await?;

        let mut failures = Vec::new();
        let projects = self
            .walk::<model::Project, _>(
                "projects",
                self.first_url(&["workspaces", &self.workspace, "projects"]),
                counters,
                Some(sink),
                &mut failures,
                &mut risk,
                |p| {
                    mapping::project_record(&p, &tenant)
                        .map(Some)
                        .map_err(|e| e.to_string())
                },
            )
            .await?;
        // Repositories are listed even after a failed project page: each
        // one read is still right, and the run is partial anyway.
        let mut foreign = 0u64;
        let repos = self
            .walk::<model::Repo, _>(
                "repositories",
                self.first_url(&["repositories", &self.workspace]),
                counters,
                Some(sink),
                &mut failures,
                &mut risk,
                |r| {
                    if mapping::foreign_workspace(&r, &tenant).is_some() {
                        foreign += 1;
                    }
                    mapping::repo_record(&r, &tenant)
                        .map(Some)
                        .map_err(|e| e.to_string())
                },
            )
            .await?;

        let report = ListingReport {
            complete: failures.is_empty(),
            figures: counters.figures(),
            failures,
            risks: risk.into_iter().collect(),
            skipped_foreign: foreign,
        };
        tracing::info!(
            pages = report.figures.pages,
            projects,
            repos,
            skipped_foreign = foreign,
            requests = report.figures.requests,
            retries = report.figures.retries,
            complete = report.complete,
            "listing finished"
        );
        Ok(report)
    }

    /// A project can only be fetched by key, and the key changes: find it by
    /// uuid in the project listing instead.
    pub(super) async fn read_project(
        &self,
        address: &SpaceAddress,
        tenant: &str,
    ) -> Result<ReadOutcome> {
        let counters = Counters::default();
        let mut failures = Vec::new();
        let mut risk = None;
        let mut found = None;
        self.walk::<model::Project, _>(
            "projects",
            self.first_url(&["workspaces", &self.workspace, "projects"]),
            &counters,
            None,
            &mut failures,
            &mut risk,
            |p| {
                let r = mapping::project_record(&p, tenant).map_err(|e| e.to_string())?;
                if r.address == *address {
                    found = Some(r);
                }
                Ok(None)
            },
        )
        .await?;
        match found {
            Some(r) => Ok(ReadOutcome::Found(r)),
            None if failures.is_empty() => Ok(ReadOutcome::Gone),
            // Retryable: the project may well exist on a page that failed.
            None => Err(ConnectorError::Transport {
                platform: PLATFORM,
                detail: format!(
                    "the project listing was incomplete: {}",
                    failures.join("; ")
                ),
            }),
        }
    }
}
