//! Reads by id and the changes feed: what an incremental sync needs
//! beyond the listing.
//!
//! A folder's record needs its path, which the feed does not carry: a read
//! walks `files.get` up the parents to the drive, which also tells how deep
//! the folder sits (only folders within the configured depth are spaces).
//! `changes.list` is followed through every `nextPageToken` to the page that
//! carries `newStartPageToken`, the next starting point.

use std::collections::{BTreeMap, HashSet};

use cmcp_domain::SpaceAddress;

use super::model::{self, ChangeList, Drive, File, StartPageToken};
use super::{
    ChangesBatch, DriveConnector, FILES_PAGE, FOLDER_FIELDS, FolderRead, MAX_WALK, PLATFORM,
    mapping,
};
use crate::common::http::Counters;
use crate::error::{ConnectorError, Result};
use crate::feed::{ChangeFeed, FeedBatch, FeedEntry, FeedPosition};

impl DriveConnector {
    /// `changes.getStartPageToken` of one drive: changes after now.
    pub async fn start_page_token(&self, drive_id: &str) -> Result<String> {
        let mut url = self.drive_v3(&["changes", "startPageToken"]);
        url.query_pairs_mut()
            .append_pair("driveId", drive_id)
            .append_pair("supportsAllDrives", "true");
        let t: StartPageToken = self.get(&url, &Counters::default()).await?;
        Ok(t.start_page_token)
    }

    /// Every change of one drive since `page_token`, following
    /// `nextPageToken` to the page that carries `newStartPageToken`.
    pub async fn changes(&self, drive_id: &str, page_token: &str) -> Result<ChangesBatch> {
        let counters = Counters::default();
        let mut changes = Vec::new();
        let mut token = page_token.to_owned();
        let mut seen = HashSet::new();
        loop {
            let mut url = self.drive_v3(&["changes"]);
            url.query_pairs_mut()
                .append_pair("pageToken", &token)
                .append_pair("driveId", drive_id)
                .append_pair("includeItemsFromAllDrives", "true")
                .append_pair("supportsAllDrives", "true")
                .append_pair("includeRemoved", "true")
                .append_pair("pageSize", &FILES_PAGE.to_string());
            let page: ChangeList = self.get(&url, &counters).await?;
            counters.page();
            changes.extend(page.changes);
            if let Some(next) = page.next_page_token.filter(|t| !t.is_empty()) {
                if !seen.insert(next.clone()) {
                    return Err(ConnectorError::Pagination {
                        platform: PLATFORM,
                        url: url.to_string(),
                        why: "a change page token came back twice".into(),
                    });
                }
                token = next;
                continue;
            }
            let new_start = page
                .new_start_page_token
                .ok_or_else(|| ConnectorError::Decode {
                    platform: PLATFORM,
                    detail: "the last changes page has no newStartPageToken".into(),
                })?;
            return Ok(ChangesBatch {
                changes,
                new_start_page_token: new_start,
                figures: counters.figures(),
            });
        }
    }

    async fn get_file(&self, id: &str, counters: &Counters) -> Result<Option<File>> {
        let mut url = self.drive_v3(&["files", id]);
        url.query_pairs_mut()
            .append_pair("supportsAllDrives", "true")
            .append_pair("fields", FOLDER_FIELDS);
        match self.get::<File>(&url, counters).await {
            Ok(f) => Ok(Some(f)),
            Err(ConnectorError::NotFound { .. } | ConnectorError::Http { status: 410, .. }) => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// `drives.get`: `None` on 404.
    pub async fn get_drive(&self, id: &str) -> Result<Option<Drive>> {
        let mut url = self.drive_v3(&["drives", id]);
        if self.settings.domain_admin_access {
            url.query_pairs_mut()
                .append_pair("useDomainAdminAccess", "true");
        }
        match self.get::<Drive>(&url, &Counters::default()).await {
            Ok(d) => Ok(Some(d)),
            Err(ConnectorError::NotFound { .. } | ConnectorError::Http { status: 410, .. }) => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// `files.get` of a folder, then of its parents up to the drive, to
    /// rebuild its path and depth. 404 on the folder itself is `Gone`.
    pub async fn read_folder(&self, id: &str) -> Result<FolderRead> {
        let counters = Counters::default();
        let Some(file) = self.get_file(id, &counters).await? else {
            return Ok(FolderRead::Gone);
        };
        let Some(drive_id) = file.drive_id.clone() else {
            return Ok(FolderRead::NotInADrive);
        };
        let mut names = vec![file.name.clone()];
        let mut parent = file.parent().map(str::to_owned);
        let mut depth = 1u32;
        while let Some(p) = parent.clone() {
            if p == drive_id {
                break;
            }
            if depth >= MAX_WALK {
                return Ok(FolderRead::NotInADrive);
            }
            // A parent that vanished mid-walk leaves the folder unplaceable.
            let Some(pf) = self.get_file(&p, &counters).await? else {
                return Ok(FolderRead::NotInADrive);
            };
            names.push(pf.name.clone());
            parent = pf.parent().map(str::to_owned);
            depth += 1;
        }
        let Some(direct_parent) = file.parent() else {
            return Ok(FolderRead::NotInADrive);
        };
        let Some(drive) = self.get_drive(&drive_id).await? else {
            return Ok(FolderRead::NotInADrive);
        };
        names.push(drive.name);
        names.reverse();
        let record = mapping::folder_record(
            &file,
            &drive_id,
            direct_parent,
            &names.join("/"),
            &self.domain,
        )?;
        Ok(FolderRead::Found { record, depth })
    }
}

/// Drive's changes feeds, one per shared drive. Every changed folder is
/// re-read by id (`files.get`, and its parents for the path) rather than
/// trusted from the feed: the path alias needs the parents anyway, and a
/// re-read is the current truth. A `removed` entry (or a trashed file) may
/// only mean lost access, so only a 404 on the direct read makes it gone.
#[async_trait::async_trait]
impl ChangeFeed for DriveConnector {
    async fn start_positions(&self) -> Result<Vec<FeedPosition>> {
        let mut positions = Vec::new();
        for d in self.list_drives(&Counters::default()).await? {
            match self.start_page_token(&d.id).await {
                Ok(token) => positions.push(FeedPosition { feed: d.id, token }),
                Err(e) => {
                    tracing::warn!(drive = %d.id, error = %e, "no start page token; that drive waits for the next full sync");
                }
            }
        }
        Ok(positions)
    }

    async fn changes_since(&self, position: &FeedPosition) -> Result<FeedBatch> {
        let batch = self.changes(&position.feed, &position.token).await?;
        let read = batch.changes.len() as u64;
        let mut skipped = 0;
        // Drive may list one file several times; the last entry is the latest.
        let mut latest: BTreeMap<String, model::Change> = BTreeMap::new();
        for c in batch.changes {
            if c.change_type.as_deref() == Some("drive") {
                skipped += 1;
                continue;
            }
            match c
                .file_id
                .clone()
                .or_else(|| c.file.as_ref().map(|f| f.id.clone()))
            {
                Some(id) => {
                    latest.insert(id, c);
                }
                None => skipped += 1,
            }
        }
        let mut entries = Vec::with_capacity(latest.len());
        for (id, change) in latest {
            if change.file.as_ref().is_some_and(|f| !f.is_folder()) {
                skipped += 1;
                continue;
            }
            let suspicious = change.removed
                || change
                    .file
                    .as_ref()
                    .is_some_and(|f| f.trashed == Some(true));
            let address = mapping::folder_address(&self.domain, &id)?;
            entries.push(self.entry(address, &id, suspicious).await?);
        }
        Ok(FeedBatch {
            entries,
            read,
            skipped,
            next: batch.new_start_page_token,
            figures: batch.figures,
        })
    }

    async fn reread(&self, address: &SpaceAddress) -> Result<FeedEntry> {
        self.entry(address.clone(), address.stable_id(), false)
            .await
    }
}

impl DriveConnector {
    /// A folder re-read as a feed entry: within the depth, gone, or outside.
    async fn entry(&self, address: SpaceAddress, id: &str, suspicious: bool) -> Result<FeedEntry> {
        Ok(match self.read_folder(id).await? {
            FolderRead::Gone => FeedEntry::Gone(address),
            FolderRead::Found { record, depth } if depth <= self.settings.depth => {
                FeedEntry::Current { record, suspicious }
            }
            FolderRead::Found { .. } | FolderRead::NotInADrive => FeedEntry::OutOfScope {
                address,
                suspicious,
            },
        })
    }
}
