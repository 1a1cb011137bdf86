//! Drive wire types → neutral records.
//!
//! Identity: a shared drive is `space:drive-shared-drive:<domain>/<drive id>`
//! and a folder `space:drive-folder:<domain>/<folder id>`; the ids are kept
//! exactly as Drive sends them (they are case-sensitive). Names and paths
//! change on a rename or a move, so they are aliases: the name, the path
//! `Drive name/Folder/Sub`, and the web URL. A folder's container is its
//! parent folder, or the drive for a folder at the top of the drive.
//!
//! A drive's folders arrive as one flat listing; [`FolderTree`] links them
//! by parent and walks down from the drive, so containers always come
//! before their children and only folders within the configured depth (1 =
//! directly in the drive) become spaces. A folder whose parent is not in the
//! listing (trashed parent, or not visible) cannot be placed and is left out.

use std::collections::HashMap;

use cmcp_domain::{Alias, AliasKind, SpaceAddress, SpaceKind, SpaceRecord, SpaceState};

use super::model::{Drive, File};
use crate::error::{ConnectorError, Result};

/// Drive's web address of a folder (a shared drive's root is a folder too).
pub fn folder_web_url(id: &str) -> String {
    format!("https://drive.google.com/drive/folders/{id}")
}

pub fn drive_address(domain: &str, drive_id: &str) -> Result<SpaceAddress> {
    address(SpaceKind::DriveSharedDrive, domain, drive_id)
}

pub fn folder_address(domain: &str, folder_id: &str) -> Result<SpaceAddress> {
    address(SpaceKind::DriveFolder, domain, folder_id)
}

/// Ids are checked against Drive's alphabet ([`SpaceAddress::checked`]):
/// a record with any other id is refused, never a space.
fn address(kind: SpaceKind, domain: &str, id: &str) -> Result<SpaceAddress> {
    SpaceAddress::checked(kind, domain, id).map_err(|e| ConnectorError::Decode {
        platform: cmcp_domain::Platform::Drive,
        detail: format!("refusing {kind} {id:?}: {e}"),
    })
}

fn push(aliases: &mut Vec<Alias>, kind: AliasKind, raw: &str) {
    if let Some(a) = Alias::new(kind, raw) {
        aliases.push(a);
    }
}

/// A shared drive: name and path are its name.
pub fn drive_record(drive: &Drive, domain: &str) -> Result<SpaceRecord> {
    let mut aliases = Vec::new();
    push(&mut aliases, AliasKind::Name, &drive.name);
    push(&mut aliases, AliasKind::Path, &drive.name);
    push(&mut aliases, AliasKind::WebUrl, &folder_web_url(&drive.id));
    Ok(SpaceRecord {
        address: drive_address(domain, &drive.id)?,
        display_name: drive.name.clone(),
        container: None,
        aliases,
        state: SpaceState::default(),
    })
}

/// A folder at `path` (`Drive name/…/Folder name`), inside `parent` (the
/// drive id for a top-level folder).
pub fn folder_record(
    file: &File,
    drive_id: &str,
    parent: &str,
    path: &str,
    domain: &str,
) -> Result<SpaceRecord> {
    let container = if parent == drive_id {
        drive_address(domain, drive_id)?
    } else {
        folder_address(domain, parent)?
    };
    let mut aliases = Vec::new();
    push(&mut aliases, AliasKind::Name, &file.name);
    push(&mut aliases, AliasKind::Path, path);
    let web = file
        .web_view_link
        .clone()
        .unwrap_or_else(|| folder_web_url(&file.id));
    push(&mut aliases, AliasKind::WebUrl, &web);
    Ok(SpaceRecord {
        address: folder_address(domain, &file.id)?,
        display_name: path.to_owned(),
        container: Some(container),
        aliases,
        state: SpaceState {
            trashed: file.trashed.unwrap_or(false),
            ..SpaceState::default()
        },
    })
}

/// One drive's folders, linked by parent.
pub struct FolderTree<'a> {
    drive: &'a Drive,
    children: HashMap<&'a str, Vec<&'a File>>,
}

impl<'a> FolderTree<'a> {
    pub fn new(drive: &'a Drive, folders: &'a [File]) -> FolderTree<'a> {
        let mut children: HashMap<&str, Vec<&File>> = HashMap::new();
        for f in folders {
            if f.trashed == Some(true) || !f.is_folder() {
                continue;
            }
            if let Some(p) = f.parent() {
                children.entry(p).or_default().push(f);
            }
        }
        for list in children.values_mut() {
            list.sort_by(|a, b| a.id.cmp(&b.id));
        }
        FolderTree { drive, children }
    }

    /// Records of the folders within `depth` levels, breadth first (every
    /// container before its children). A folder whose id is not a Drive id
    /// is refused (with its reason in `refused`), and so is what is below
    /// it: it cannot be placed.
    pub fn records(&self, depth: u32, domain: &str, refused: &mut Vec<String>) -> Vec<SpaceRecord> {
        let mut out = Vec::new();
        // (folder id, its path, its level)
        let mut level: Vec<(&str, String)> =
            vec![(self.drive.id.as_str(), self.drive.name.clone())];
        for _ in 0..depth {
            let mut next = Vec::new();
            for (parent, parent_path) in &level {
                for f in self.children.get(parent).into_iter().flatten() {
                    let path = format!("{parent_path}/{}", f.name);
                    match folder_record(f, &self.drive.id, parent, &path, domain) {
                        Ok(r) => {
                            out.push(r);
                            next.push((f.id.as_str(), path));
                        }
                        Err(e) => refused.push(format!("drive {}: {e}", self.drive.id)),
                    }
                }
            }
            if next.is_empty() {
                break;
            }
            level = next;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(id: &str, name: &str, parent: &str) -> File {
        serde_json::from_value(serde_json::json!({
            "id": id, "name": name, "parents": [parent], "driveId": "0ADrv",
            "mimeType": "application/vnd.google-apps.folder", "trashed": false,
            "webViewLink": format!("https://drive.google.com/drive/folders/{id}")
        }))
        .unwrap()
    }

    fn values(r: &SpaceRecord, kind: AliasKind) -> Vec<String> {
        r.aliases
            .iter()
            .filter(|a| a.kind == kind)
            .map(|a| a.raw.clone())
            .collect()
    }

    #[test]
    fn tree_gives_paths_containers_and_respects_depth() {
        let drive = Drive {
            id: "0ADrv".into(),
            name: "Engineering".into(),
            hidden: None,
        };
        let folders = vec![
            file("1bB", "Specs", "0ADrv"),
            file("1Bb", "Designs", "0ADrv"),
            file("1cc", "Old", "1bB"),
            file("1dd", "Deep", "1cc"),
            file("1orphan", "Lost", "1gone"),
        ];
        let tree = FolderTree::new(&drive, &folders);
        let mut refused = Vec::new();
        let recs = tree.records(2, "Example.com", &mut refused);
        assert!(refused.is_empty());
        let got: Vec<(String, String, String)> = recs
            .iter()
            .map(|r| {
                (
                    r.address.to_string(),
                    r.display_name.clone(),
                    r.container.as_ref().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "space:drive-folder:example.com/1Bb".to_owned(),
                    "Engineering/Designs".to_owned(),
                    "space:drive-shared-drive:example.com/0ADrv".to_owned()
                ),
                (
                    "space:drive-folder:example.com/1bB".to_owned(),
                    "Engineering/Specs".to_owned(),
                    "space:drive-shared-drive:example.com/0ADrv".to_owned()
                ),
                (
                    "space:drive-folder:example.com/1cc".to_owned(),
                    "Engineering/Specs/Old".to_owned(),
                    "space:drive-folder:example.com/1bB".to_owned()
                ),
            ]
        );
        assert_eq!(values(&recs[2], AliasKind::Name), ["Old"]);
        assert_eq!(values(&recs[2], AliasKind::Path), ["Engineering/Specs/Old"]);
        assert_eq!(
            values(&recs[2], AliasKind::WebUrl),
            ["https://drive.google.com/drive/folders/1cc"]
        );
        assert_eq!(tree.records(3, "example.com", &mut refused).len(), 4);
        assert_eq!(tree.records(0, "example.com", &mut refused).len(), 0);
        // A folder with a malformed id is refused, with what is below it.
        let folders = vec![file("1a b", "Bad", "0ADrv"), file("1ok", "Below", "1a b")];
        let tree = FolderTree::new(&drive, &folders);
        assert!(tree.records(2, "example.com", &mut refused).is_empty());
        assert_eq!(refused.len(), 1, "{refused:?}");
    }

    #[test]
    fn a_drive_is_a_container_named_and_pathed_by_its_name() {
        let r = drive_record(
            &Drive {
                id: "0AbCd".into(),
                name: "Finance Team".into(),
                hidden: None,
            },
            "example.com",
        )
        .unwrap();
        assert_eq!(
            r.address.to_string(),
            "space:drive-shared-drive:example.com/0AbCd"
        );
        assert!(r.container.is_none());
        assert_eq!(values(&r, AliasKind::Name), ["Finance Team"]);
        assert_eq!(values(&r, AliasKind::Path), ["Finance Team"]);
    }

    #[test]
    fn an_id_outside_drives_alphabet_is_refused() {
        let bad = Drive {
            id: "0Ab/Cd".into(),
            name: "Finance".into(),
            hidden: None,
        };
        let err = drive_record(&bad, "example.com").unwrap_err().to_string();
        assert!(err.contains("A-Z, a-z, 0-9"), "{err}");
        let f = file("1a b", "Specs", "0ADrv");
        assert!(folder_record(&f, "0ADrv", "0ADrv", "E/Specs", "example.com").is_err());
    }
}
