//! Jira Cloud wire types: only the fields the catalogue needs.

use serde::{Deserialize, Deserializer};

/// `GET /_edge/tenant_info`: the site's cloudId, the tenant of every space.
#[derive(Debug, Clone, Deserialize)]
pub struct TenantInfo {
    #[serde(rename = "cloudId")]
    pub cloud_id: String,
}

/// A project of `GET /rest/api/3/project/search?expand=projectKeys`, or
/// `GET /rest/api/3/project/{id}`.
#[derive(Debug, Clone, Deserialize)]
pub struct Project {
    /// A numeric string in REST, a number in some webhook payloads: either
    /// way it becomes a string.
    #[serde(deserialize_with = "id_text")]
    pub id: String,
    pub key: String,
    pub name: String,
    /// Every key the project ever had, the current one included (only with
    /// `expand=projectKeys`).
    #[serde(default, rename = "projectKeys")]
    pub project_keys: Vec<String>,
    #[serde(default)]
    pub archived: bool,
    /// In the recycle bin (`status=deleted`).
    #[serde(default)]
    pub deleted: bool,
}

/// The `PageBeanProject` envelope. `maxResults` is what the server used,
/// which may be less than what was asked.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Page {
    #[serde(default)]
    pub start_at: u64,
    #[serde(default)]
    pub max_results: u64,
    #[serde(default)]
    pub total: Option<u64>,
    #[serde(default)]
    pub is_last: Option<bool>,
    #[serde(default)]
    pub values: Vec<serde_json::Value>,
}

fn id_text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Id {
        Text(String),
        Number(u64),
    }
    Ok(match Id::deserialize(d)? {
        Id::Text(s) => s.trim().to_owned(),
        Id::Number(n) => n.to_string(),
    })
}
