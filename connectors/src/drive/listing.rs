//! The domain listing: every shared drive (`drives.list`), then for each
//! drive one `files.list` query for all its non-trashed folders, placed in a
//! tree in memory and kept to the configured depth. Records go to the sink a
//! drive at a time, in chunks. A failed page or an `incompleteSearch` makes
//! the listing partial; a refused credential or a rate limit ends it.

use cmcp_domain::SpaceRecord;
use tokio::sync::mpsc::Sender;
use url::Url;

use super::model::{Drive, DriveList, File, FileList};
use super::{
    CHUNK, DRIVES_PAGE, DriveConnector, FILES_PAGE, FOLDER_FIELDS, PLATFORM, mapping, model,
};
use crate::ListingReport;
use crate::common::http::Counters;
use crate::error::{ConnectorError, Result};

impl DriveConnector {
    fn drives_url(&self) -> Url {
        let mut url = self.drive_v3(&["drives"]);
        url.query_pairs_mut()
            .append_pair("pageSize", &DRIVES_PAGE.to_string());
        if self.settings.domain_admin_access {
            url.query_pairs_mut()
                .append_pair("useDomainAdminAccess", "true");
        }
        url
    }

    fn folders_url(&self, drive_id: &str) -> Url {
        let mut url = self.drive_v3(&["files"]);
        url.query_pairs_mut()
            .append_pair("corpora", "drive")
            .append_pair("driveId", drive_id)
            .append_pair("includeItemsFromAllDrives", "true")
            .append_pair("supportsAllDrives", "true")
            .append_pair(
                "q",
                &format!("mimeType='{}' and trashed=false", model::FOLDER_MIME),
            )
            .append_pair(
                "fields",
                &format!("nextPageToken,incompleteSearch,files({FOLDER_FIELDS})"),
            )
            .append_pair("pageSize", &FILES_PAGE.to_string());
        url
    }

    /// Every shared drive of the domain (all pages).
    pub async fn list_drives(&self, counters: &Counters) -> Result<Vec<Drive>> {
        let mut drives = Vec::new();
        self.paginate::<DriveList, _>(
            self.drives_url(),
            counters,
            "drives",
            |p| p.next_page_token.clone(),
            |p| {
                drives.extend(p.drives);
                Ok(())
            },
        )
        .await
        .map_err(|(e, _)| e)?;
        Ok(drives)
    }

    async fn send(&self, sink: &Sender<Vec<SpaceRecord>>, records: Vec<SpaceRecord>) -> Result<()> {
        for chunk in records.chunks(CHUNK) {
            sink.send(chunk.to_vec())
                .await
                .map_err(|_| ConnectorError::SinkClosed { platform: PLATFORM })?;
        }
        Ok(())
    }

    pub(super) async fn list_inner(
        &self,
        sink: &Sender<Vec<SpaceRecord>>,
        counters: &Counters,
    ) -> Result<ListingReport> {
        let mut failures = Vec::new();
        let risks = match self.scope_risks().await {
            Ok(r) => r,
            Err(e @ ConnectorError::Unauthorized { .. }) => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, "tokeninfo failed; scopes not checked this run");
                Vec::new()
            }
        };

        // Drives, page by page, each page to the sink at once.
        let mut drives: Vec<Drive> = Vec::new();
        let mut pending: Vec<SpaceRecord> = Vec::new();
        let mut refused: Vec<String> = Vec::new();
        let domain = self.domain.clone();
        let result = self
            .paginate::<DriveList, _>(
                self.drives_url(),
                counters,
                "drives",
                |p| p.next_page_token.clone(),
                |p| {
                    for d in p.drives {
                        // A drive whose id is not a Drive id is refused:
                        // never a space, and the listing is partial.
                        match mapping::drive_record(&d, &domain) {
                            Ok(r) => {
                                pending.push(r);
                                drives.push(d);
                            }
                            Err(e) => refused.push(e.to_string()),
                        }
                    }
                    Ok(())
                },
            )
            .await;
        match result {
            Ok(()) => {}
            Err((e, 1)) if drives.is_empty() => return Err(e),
            Err((
                e @ (ConnectorError::Unauthorized { .. } | ConnectorError::RateLimited { .. }),
                _,
            )) => return Err(e),
            Err((e, n)) => failures.push(format!("drives page {n}: {e}")),
        }
        self.send(sink, std::mem::take(&mut pending)).await?;

        let mut folders_total = 0usize;
        for drive in &drives {
            let mut folders: Vec<File> = Vec::new();
            let mut incomplete_search = false;
            let result = self
                .paginate::<FileList, _>(
                    self.folders_url(&drive.id),
                    counters,
                    "folders",
                    |p| p.next_page_token.clone(),
                    |p| {
                        incomplete_search |= p.incomplete_search == Some(true);
                        folders.extend(p.files);
                        Ok(())
                    },
                )
                .await;
            match result {
                Ok(()) => {}
                Err((
                    e @ (ConnectorError::Unauthorized { .. } | ConnectorError::RateLimited { .. }),
                    _,
                )) => {
                    return Err(e);
                }
                Err((e, n)) => failures.push(format!("drive {}: folders page {n}: {e}", drive.id)),
            }
            if incomplete_search {
                failures.push(format!(
                    "drive {}: Drive reported an incomplete search",
                    drive.id
                ));
            }
            // What could be read is still placed: the run is partial anyway.
            let records = mapping::FolderTree::new(drive, &folders).records(
                self.settings.depth,
                &self.domain,
                &mut refused,
            );
            folders_total += records.len();
            self.send(sink, records).await?;
        }

        failures.append(&mut refused);
        let report = ListingReport {
            complete: failures.is_empty(),
            figures: counters.figures(),
            failures,
            risks,
            skipped_foreign: 0,
        };
        tracing::info!(
            drives = drives.len(),
            folders = folders_total,
            pages = report.figures.pages,
            requests = report.figures.requests,
            complete = report.complete,
            "drive listing finished"
        );
        Ok(report)
    }
}
