//! Drive API v3 wire types, as the discovery document describes them
//! (schemas `Drive`, `DriveList`, `File`, `FileList`, `Change`, `ChangeList`,
//! `StartPageToken`), plus the OAuth token and tokeninfo answers.
//!
//! Only the fields the catalogue reads are declared; serde ignores the rest,
//! so a field Google adds tomorrow changes nothing. Every field is optional
//! where the schema does not promise it: a listing must not fail because a
//! partial-fields answer left one out.

use serde::Deserialize;

/// The MIME type Drive gives folders.
pub const FOLDER_MIME: &str = "application/vnd.google-apps.folder";

/// A shared drive (`Drive`). Its `id` is also the id of its root folder.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Drive {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub hidden: Option<bool>,
}

/// `drives.list` answer (`DriveList`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DriveList {
    #[serde(default)]
    pub drives: Vec<Drive>,
    #[serde(default)]
    pub next_page_token: Option<String>,
}

/// A file or folder (`File`), with the fields the listing asks for.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct File {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub mime_type: Option<String>,
    /// "A file can only have one parent folder" in shared drives; the list
    /// shape stays for compatibility.
    #[serde(default)]
    pub parents: Vec<String>,
    #[serde(default)]
    pub drive_id: Option<String>,
    #[serde(default)]
    pub trashed: Option<bool>,
    #[serde(default)]
    pub web_view_link: Option<String>,
}

impl File {
    pub fn is_folder(&self) -> bool {
        self.mime_type.as_deref().is_none_or(|m| m == FOLDER_MIME)
    }

    pub fn parent(&self) -> Option<&str> {
        self.parents.first().map(String::as_str)
    }
}

/// `files.list` answer (`FileList`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileList {
    #[serde(default)]
    pub files: Vec<File>,
    #[serde(default)]
    pub next_page_token: Option<String>,
    /// True when Drive could not search every corpus: the answer may miss
    /// items, so the listing is not complete.
    #[serde(default)]
    pub incomplete_search: Option<bool>,
}

/// One entry of the changes feed (`Change`). `removed` means "the file or
/// shared drive has been removed from this list of changes, for example by
/// deletion or loss of access" — not necessarily deleted.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    #[serde(default)]
    pub change_type: Option<String>,
    #[serde(default)]
    pub removed: bool,
    #[serde(default)]
    pub file_id: Option<String>,
    #[serde(default)]
    pub file: Option<File>,
    #[serde(default)]
    pub drive_id: Option<String>,
    #[serde(default)]
    pub drive: Option<Drive>,
    #[serde(default)]
    pub time: Option<String>,
}

/// `changes.list` answer (`ChangeList`): `nextPageToken` while there are
/// more pages, `newStartPageToken` on the last one.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangeList {
    #[serde(default)]
    pub changes: Vec<Change>,
    #[serde(default)]
    pub next_page_token: Option<String>,
    #[serde(default)]
    pub new_start_page_token: Option<String>,
}

/// `changes.getStartPageToken` answer (`StartPageToken`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartPageToken {
    pub start_page_token: String,
}

/// Google's error envelope: `{"error": {"code", "message", "errors": [{"reason", …}]}}`.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct ErrorEnvelope {
    #[serde(default)]
    pub error: ErrorBody,
}

#[derive(Debug, Clone, Deserialize, Default)]
pub struct ErrorBody {
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub errors: Vec<ErrorItem>,
}

#[derive(Debug, Clone, Deserialize, Default)]
pub struct ErrorItem {
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
}

/// The OAuth token endpoint's answer to a JWT-bearer grant.
#[derive(Debug, Clone, Deserialize)]
pub struct TokenResponse {
    pub access_token: String,
    #[serde(default)]
    pub expires_in: Option<u64>,
}

/// `GET /oauth2/v3/tokeninfo`: what the access token was granted.
#[derive(Debug, Clone, Deserialize)]
pub struct TokenInfo {
    #[serde(default)]
    pub scope: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Drive v3 discovery document the fixtures crate ships (origin in
    /// fixtures/data/SOURCES.md).
    const DISCOVERY: &str =
        include_str!("../../../fixtures/data/drive/drive-v3-discovery-document.json");

    #[test]
    fn declared_fields_exist_in_the_discovery_schemas() {
        let doc: serde_json::Value = serde_json::from_str(DISCOVERY).unwrap();
        let schemas = &doc["schemas"];
        for (schema, fields) in [
            ("Drive", &["id", "name", "hidden"][..]),
            ("DriveList", &["drives", "nextPageToken"][..]),
            (
                "File",
                &[
                    "id",
                    "name",
                    "mimeType",
                    "parents",
                    "driveId",
                    "trashed",
                    "webViewLink",
                ][..],
            ),
            (
                "FileList",
                &["files", "nextPageToken", "incompleteSearch"][..],
            ),
            (
                "Change",
                &[
                    "changeType",
                    "removed",
                    "fileId",
                    "file",
                    "driveId",
                    "drive",
                    "time",
                ][..],
            ),
            (
                "ChangeList",
                &["changes", "nextPageToken", "newStartPageToken"][..],
            ),
            ("StartPageToken", &["startPageToken"][..]),
        ] {
            for f in fields {
                assert!(
                    schemas[schema]["properties"].get(*f).is_some(),
                    "{schema}.{f} is not in the discovery document"
                );
            }
        }
    }

    #[test]
    fn a_removed_change_has_no_file_and_parses() {
        let c: Change = serde_json::from_str(
            r#"{"kind":"drive#change","changeType":"file","removed":true,"fileId":"1AbC","driveId":"0AXy","time":"2026-01-01T00:00:00.000Z"}"#,
        )
        .unwrap();
        assert!(c.removed);
        assert!(c.file.is_none());
        assert_eq!(c.file_id.as_deref(), Some("1AbC"));
    }
}
