//! The routes cMCP calls, with a `service` key (or a member key for its own
//! person): resolve a fingerprint, a person's manifest, the change feed.
//! Every one reads with the caller's [`Viewer`](cmcp_registry::Viewer)
//! (see [`asking`]): company spaces, plus the named person's private ones.

pub mod asking;
mod errors_doc;
pub mod wire;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cmcp_registry::{Cursor, Resolved, Viewer};
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::AdminState;
use crate::api::extract::Params;
use crate::error::AdminError;
use asking::{Asking, person_id, viewer_for};
pub use errors_doc::document_errors;
use wire::{AmbiguousResponse, ChangesResponse, ManifestResponse, ResolveResponse};

/// A manifest diff spanning more changes than this answers the whole
/// manifest instead.
pub const MAX_MANIFEST_DIFF: i64 = 50_000;

#[derive(Debug, Deserialize, IntoParams)]
pub struct ResolveQuery {
    /// What the tool sees: a git remote in any spelling, a web URL (a path
    /// inside the repo is fine), a full name, a key, a bare id or uuid, a
    /// Drive folder id or URL, or a space address.
    pub fingerprint: String,
}

#[utoipa::path(get, path = "/v1/spaces/resolve", params(ResolveQuery,
        ("X-CMCP-Person" = Option<String>, Header, description = "The person a service key acts for")),
    responses((status = 200, description = "The space and how it matched", body = ResolveResponse),
              (status = 400, description = "Bad fingerprint or person id", body = wire::ErrorBody),
              (status = 401, description = "No valid API key", body = wire::ErrorBody),
              (status = 403, description = "A member key naming another person", body = wire::ErrorBody),
              (status = 404, description = "No space the caller may see has that fingerprint", body = wire::ErrorBody),
              (status = 409, description = "Two or more spaces match at the same rank", body = AmbiguousResponse)))]
async fn resolve(
    State(st): State<AdminState>,
    asking: Asking,
    q: Params<ResolveQuery>,
) -> Result<Response, AdminError> {
    let q = q.open()?;
    let fingerprint = q.fingerprint.trim();
    if fingerprint.is_empty() || fingerprint.len() > 2048 {
        return Err(AdminError::BadRequest(
            "fingerprint must be 1 to 2048 characters".to_owned(),
        ));
    }
    let resolved = st.resolve_one(fingerprint, &asking.viewer).await?;
    match resolved {
        Resolved::Found(r) => Ok(Json(ResolveResponse::new(&r)).into_response()),
        Resolved::Ambiguous(all) => {
            let candidates: Vec<ResolveResponse> = all.iter().map(ResolveResponse::new).collect();
            let body = AmbiguousResponse {
                error: format!(
                    "{fingerprint:?} names {} spaces at the same rank",
                    candidates.len()
                ),
                candidates,
            };
            Ok((StatusCode::CONFLICT, Json(body)).into_response())
        }
        Resolved::Unknown => Err(AdminError::NotFound(format!(
            "no space is known by {fingerprint:?}"
        ))),
    }
}

#[derive(Debug, Deserialize, IntoParams)]
pub struct ManifestQuery {
    /// A `version` of an earlier answer: only what changed after it.
    pub since: Option<String>,
}

#[utoipa::path(get, path = "/v1/people/{person}/manifest",
    params(("person" = String, Path, description = "Person id"), ManifestQuery,
        ("X-CMCP-Person" = Option<String>, Header, description = "When given, must be the same person")),
    responses((status = 200, description = "The person's spaces with their recognisers, or the difference since a version", body = ManifestResponse),
              (status = 400, description = "Bad person id or version", body = wire::ErrorBody),
              (status = 401, description = "No valid API key", body = wire::ErrorBody),
              (status = 403, description = "A member key of another person, or a header naming another person", body = wire::ErrorBody)))]
async fn manifest(
    State(st): State<AdminState>,
    asking: Asking,
    Path(person): Path<String>,
    q: Params<ManifestQuery>,
) -> Result<Json<ManifestResponse>, AdminError> {
    let person = person_id(&person)?;
    // The path names the person; a header or a member key's own person
    // must agree with it.
    viewer_for(&asking.caller, Some(person.clone()))?;
    if matches!(&asking.viewer, Viewer::Person(p) if *p != person) {
        return Err(AdminError::Forbidden(
            "X-CMCP-Person names another person".to_owned(),
        ));
    }
    let since: Option<Cursor> = q.open()?.since.as_deref().map(str::parse).transpose()?;
    let m = st.store.manifest(&person, since, MAX_MANIFEST_DIFF).await?;
    Ok(Json(m.into()))
}

#[derive(Debug, Deserialize, IntoParams)]
pub struct ChangesQuery {
    /// The `next` of the previous page; 0 (the default) is the start.
    pub after: Option<String>,
    /// At most this many rows are read (1 to 10,000; 500 by default).
    pub limit: Option<i64>,
}

#[utoipa::path(get, path = "/v1/changes",
    params(ChangesQuery, ("X-CMCP-Person" = Option<String>, Header, description = "The person a service key acts for")),
    responses((status = 200, description = "Changes after the cursor, in commit order, and the next cursor", body = ChangesResponse),
              (status = 400, description = "Bad cursor, limit or person id", body = wire::ErrorBody),
              (status = 401, description = "No valid API key", body = wire::ErrorBody),
              (status = 403, description = "A member key naming another person", body = wire::ErrorBody),
              (status = 410, description = "The cursor is older than the feed keeps: read the manifest again and follow the feed from its version", body = wire::ErrorBody)))]
async fn changes(
    State(st): State<AdminState>,
    asking: Asking,
    q: Params<ChangesQuery>,
) -> Result<Json<ChangesResponse>, AdminError> {
    let q = q.open()?;
    let after: Cursor = q.after.as_deref().unwrap_or("0").parse()?;
    let limit = q.limit.unwrap_or(500);
    if !(1..=10_000).contains(&limit) {
        return Err(AdminError::BadRequest(
            "limit must be 1 to 10000".to_owned(),
        ));
    }
    let page = st.store.changes(after, limit, Some(&asking.viewer)).await?;
    Ok(Json(ChangesResponse {
        changes: page.changes.into_iter().map(Into::into).collect(),
        next: page.next.to_string(),
    }))
}

/// cMCP's routes, documented, for the `/v1` router to merge.
pub fn routes() -> OpenApiRouter<AdminState> {
    OpenApiRouter::new()
        .routes(routes!(resolve))
        .routes(routes!(manifest))
        .routes(routes!(changes))
}
