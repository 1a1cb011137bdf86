//! What cMCP's routes answer, as typed schemas for the OpenAPI document.
//! The store's rows stay free of HTTP concerns; these are built from them.

use cmcp_domain::Owner;
use cmcp_registry::{
    ChangeRow, Manifest, ManifestEntry, PlaceRef, Recogniser, Resolution, SpaceRow,
};
use serde::Serialize;
use utoipa::ToSchema;

/// Every error: `{"error": "…"}`, a sentence for a person.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: String,
}

/// The cMCP place a space is mapped to (directly or through `via`, its
/// container).
#[derive(Debug, Serialize, ToSchema)]
pub struct PlaceView {
    pub id: String,
    /// project, team or client.
    pub kind: String,
    pub name: String,
    /// `kind/id`.
    pub path: String,
    pub via: String,
}

impl From<PlaceRef> for PlaceView {
    fn from(p: PlaceRef) -> Self {
        PlaceView {
            id: p.id,
            kind: p.kind,
            name: p.name,
            path: p.path,
            via: p.via.to_string(),
        }
    }
}

/// One space as cMCP sees it.
#[derive(Debug, Serialize, ToSchema)]
pub struct SpaceView {
    /// `space:<kind>:<tenant or host>/<stable id>`.
    pub address: String,
    pub kind: String,
    pub display_name: String,
    /// company or person.
    pub owner: String,
    /// active, missing or tombstoned.
    pub status: String,
    pub archived: bool,
    /// The address of the container (org, workspace, project, drive).
    pub container: Option<String>,
    pub place: Option<PlaceView>,
}

pub fn owner_side(o: &Owner) -> &'static str {
    match o {
        Owner::Company => "company",
        Owner::Person(_) => "person",
    }
}

impl SpaceView {
    pub fn new(s: &SpaceRow, place: Option<PlaceRef>) -> SpaceView {
        SpaceView {
            address: s.address.to_string(),
            kind: s.address.kind().as_str().to_owned(),
            display_name: s.display_name.clone(),
            owner: owner_side(&s.owner).to_owned(),
            status: s.status.as_str().to_owned(),
            archived: s.archived,
            container: s.container.as_ref().map(|c| c.to_string()),
            place: place.map(Into::into),
        }
    }
}

/// How a fingerprint matched.
#[derive(Debug, Serialize, ToSchema)]
pub struct MatchView {
    /// address, id, url, key, full-name or name (strongest first).
    pub rank: String,
    /// The alias kind that matched; null for an address or a bare id.
    pub alias_kind: Option<String>,
    pub value: Option<String>,
    pub raw: Option<String>,
    /// The match went through an alias the space no longer has.
    pub retired: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ResolveResponse {
    pub space: SpaceView,
    #[serde(rename = "match")]
    pub matched: MatchView,
}

impl ResolveResponse {
    pub fn new(r: &Resolution) -> ResolveResponse {
        ResolveResponse {
            space: SpaceView::new(&r.space, r.place.clone()),
            matched: MatchView {
                rank: r.rank.as_str().to_owned(),
                alias_kind: r.alias.as_ref().map(|a| a.kind.as_str().to_owned()),
                value: r.alias.as_ref().map(|a| a.value.clone()),
                raw: r.alias.as_ref().map(|a| a.raw.clone()),
                retired: r.retired,
            },
        }
    }
}

/// 409: the fingerprint names more than one space at the same rank.
#[derive(Debug, Serialize, ToSchema)]
pub struct AmbiguousResponse {
    pub error: String,
    pub candidates: Vec<ResolveResponse>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RecogniserView {
    /// git-remote, first-commit, host-id, key or drive-folder-id.
    pub kind: String,
    pub value: String,
    /// For a remote: the spellings git prints that fold to `value`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub spellings: Vec<String>,
}

impl From<Recogniser> for RecogniserView {
    fn from(r: Recogniser) -> Self {
        RecogniserView {
            kind: r.kind,
            value: r.value,
            spellings: r.spellings,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ManifestSpace {
    pub address: String,
    pub kind: String,
    pub display_name: String,
    /// company or person.
    pub owner: String,
    pub status: String,
    pub recognisers: Vec<RecogniserView>,
    /// Retired recognisers that still resolve.
    pub retired: Vec<RecogniserView>,
    pub place: Option<PlaceView>,
}

impl From<ManifestEntry> for ManifestSpace {
    fn from(e: ManifestEntry) -> Self {
        ManifestSpace {
            address: e.address.to_string(),
            kind: e.kind.as_str().to_owned(),
            display_name: e.display_name,
            owner: owner_side(&e.owner).to_owned(),
            status: e.status.as_str().to_owned(),
            recognisers: e.recognisers.into_iter().map(Into::into).collect(),
            retired: e.retired.into_iter().map(Into::into).collect(),
            place: e.place.map(Into::into),
        }
    }
}

/// A person's manifest. `full`: `spaces` is everything; otherwise
/// `added`, `changed` and `removed` are what changed since `since`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ManifestResponse {
    pub person: String,
    /// Pass as `since` to get only what changed after this answer.
    pub version: String,
    pub full: bool,
    /// A `since` was given but is too old (or unknown) to diff.
    pub too_old: bool,
    pub spaces: Vec<ManifestSpace>,
    pub added: Vec<ManifestSpace>,
    pub changed: Vec<ManifestSpace>,
    /// Addresses no longer in the manifest (tombstoned).
    pub removed: Vec<String>,
}

impl From<Manifest> for ManifestResponse {
    fn from(m: Manifest) -> Self {
        let list = |v: Vec<ManifestEntry>| v.into_iter().map(Into::into).collect();
        ManifestResponse {
            person: m.person,
            version: m.version.to_string(),
            full: m.full,
            too_old: m.too_old,
            spaces: list(m.spaces),
            added: list(m.added),
            changed: list(m.changed),
            removed: m.removed.iter().map(|a| a.to_string()).collect(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ChangeView {
    /// This change's position; `after` this value starts after it.
    pub cursor: String,
    /// Epoch milliseconds.
    pub at: i64,
    /// space-created, alias-added, alias-retired, state-changed,
    /// owner-changed, mapping-approved or mapping-undone.
    pub kind: String,
    pub address: String,
    /// Kind-specific facts: the alias (`alias_kind`, `value`, `raw`), the
    /// new `state`, owner sides `from`/`to`, the `place_id`; a new space's
    /// `status`, `display_name` and the `aliases` it was created with.
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
}

impl From<ChangeRow> for ChangeView {
    fn from(c: ChangeRow) -> Self {
        ChangeView {
            cursor: c.cursor.to_string(),
            at: c.at,
            kind: c.kind.as_str().to_owned(),
            address: c.address.to_string(),
            detail: c.detail,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ChangesResponse {
    pub changes: Vec<ChangeView>,
    /// Where the next page starts; the same as `after` when nothing new has
    /// committed.
    pub next: String,
}
