//! A person's linked accounts over the API: link a personal GitHub, list
//! the links with their risks, unlink one. A member key acts for its own
//! person; a service (or admin) key for the person in the path.
//!
//! Why a [`GithubLinker`] and not a call: checking a token means asking
//! GitHub (`GET /user`) and linking queues a sync, which the connectors and
//! the worker do; the admin crate knows neither, so the binary hands it
//! the one linking function the CLI uses too.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use cmcp_domain::{ConnectionStatus, RiskNotice, Token};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::AdminState;
use crate::client_api::asking::{Asking, person_id, viewer_for};
use crate::client_api::wire::ErrorBody;
use crate::error::AdminError;

/// Longest token accepted in a body; GitHub's are far shorter.
const MAX_TOKEN_LEN: usize = 1024;

/// Why a link was not made.
#[derive(Debug, thiserror::Error)]
pub enum LinkFailure {
    /// GitHub refused the token, or the request makes no sense.
    #[error("{0}")]
    Rejected(String),
    #[error("internal error")]
    Internal(String),
}

impl From<LinkFailure> for AdminError {
    fn from(e: LinkFailure) -> Self {
        match e {
            LinkFailure::Rejected(why) => AdminError::BadRequest(why),
            LinkFailure::Internal(detail) => AdminError::Internal(detail),
        }
    }
}

/// Checks a token and links it (see the module docs).
#[async_trait::async_trait]
pub trait GithubLinker: Send + Sync {
    async fn link(
        &self,
        person: &str,
        token: Token,
        base_url: Option<String>,
        actor: &str,
    ) -> Result<LinkedAccount, LinkFailure>;
}

/// The handle [`AdminState`] keeps.
pub type Linker = Arc<dyn GithubLinker>;

/// `POST /v1/people/{person}/github`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkGithubRequest {
    /// A GitHub token of the person; read-only is enough. Never returned.
    #[schema(value_type = String)]
    pub token: Token,
    /// An Enterprise Server's API base; github.com when absent.
    pub base_url: Option<String>,
}

/// A linked account, as answered after linking and when listing.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LinkedAccount {
    pub connection_id: String,
    pub person: String,
    pub platform: String,
    /// The account on the platform (GitHub's login).
    pub login: String,
    pub base_url: String,
    /// The token can do more than read: shown to the person.
    #[schema(value_type = Vec<Object>)]
    pub risks: Vec<RiskNotice>,
}

/// `DELETE …/accounts/{connection}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct UnlinkResponse {
    pub connection_id: String,
    pub sightings_removed: u64,
    pub spaces_tombstoned: u64,
}

/// The person in the path, when the caller may act for them.
fn acting_for(asking: &Asking, raw: &str) -> Result<String, AdminError> {
    let person = person_id(raw)?;
    viewer_for(&asking.caller, Some(person.clone()))?;
    Ok(person)
}

#[utoipa::path(post, path = "/v1/people/{person}/github", request_body = LinkGithubRequest,
    params(("person" = String, Path, description = "Person id")),
    responses((status = 201, description = "Linked; the first sync is queued", body = LinkedAccount),
              (status = 400, description = "A token GitHub refuses, or a bad request", body = ErrorBody),
              (status = 401, description = "No valid API key", body = ErrorBody),
              (status = 403, description = "A member key of another person", body = ErrorBody)))]
async fn link_github(
    State(st): State<AdminState>,
    asking: Asking,
    Path(person): Path<String>,
    body: crate::api::extract::Body<LinkGithubRequest>,
) -> Result<(StatusCode, Json<LinkedAccount>), AdminError> {
    let person = acting_for(&asking, &person)?;
    let body = body.open()?;
    let len = body.token.expose().trim().len();
    if len == 0 || len > MAX_TOKEN_LEN {
        return Err(AdminError::BadRequest(format!(
            "token must be 1 to {MAX_TOKEN_LEN} characters"
        )));
    }
    let linker = st
        .github_linker
        .clone()
        .ok_or_else(|| AdminError::Internal("no GitHub linker configured".to_owned()))?;
    let linked = linker
        .link(&person, body.token, body.base_url, &asking.caller.actor())
        .await?;
    Ok((StatusCode::CREATED, Json(linked)))
}

#[utoipa::path(get, path = "/v1/people/{person}/accounts",
    params(("person" = String, Path, description = "Person id")),
    responses((status = 200, description = "The person's linked accounts", body = Vec<LinkedAccount>),
              (status = 400, description = "Bad person id", body = ErrorBody),
              (status = 401, description = "No valid API key", body = ErrorBody),
              (status = 403, description = "A member key of another person", body = ErrorBody)))]
async fn accounts(
    State(st): State<AdminState>,
    asking: Asking,
    Path(person): Path<String>,
) -> Result<Json<Vec<LinkedAccount>>, AdminError> {
    let person = acting_for(&asking, &person)?;
    Ok(Json(linked_accounts(&st, &person).await?))
}

/// `person`'s linked accounts, for the API and the `/me` page.
pub async fn linked_accounts(
    st: &AdminState,
    person: &str,
) -> Result<Vec<LinkedAccount>, AdminError> {
    let rows = st.store.person_connections(person).await?;
    Ok(rows
        .into_iter()
        .filter(|c| c.status != ConnectionStatus::Unlinked)
        .map(|c| LinkedAccount {
            connection_id: c.id,
            person: person.to_owned(),
            platform: c.platform.to_string(),
            login: c.scope,
            base_url: c.base_url,
            risks: c.risks,
        })
        .collect())
}

#[utoipa::path(delete, path = "/v1/people/{person}/accounts/{connection}",
    params(("person" = String, Path, description = "Person id"),
           ("connection" = String, Path, description = "The linked connection")),
    responses((status = 200, description = "Unlinked: token erased, sightings removed", body = UnlinkResponse),
              (status = 400, description = "Bad person id", body = ErrorBody),
              (status = 401, description = "No valid API key", body = ErrorBody),
              (status = 403, description = "A member key of another person", body = ErrorBody),
              (status = 404, description = "Not a linked connection of this person", body = ErrorBody)))]
async fn unlink(
    State(st): State<AdminState>,
    asking: Asking,
    Path((person, connection)): Path<(String, String)>,
) -> Result<Json<UnlinkResponse>, AdminError> {
    let person = acting_for(&asking, &person)?;
    let gone = st
        .store
        .unlink_connection(&person, &connection, &asking.caller.actor())
        .await?;
    Ok(Json(UnlinkResponse {
        connection_id: connection,
        sightings_removed: gone.sightings,
        spaces_tombstoned: gone.tombstoned,
    }))
}

/// The people routes, for the `/v1` router to merge.
pub fn routes() -> OpenApiRouter<AdminState> {
    OpenApiRouter::new()
        .routes(routes!(link_github))
        .routes(routes!(accounts))
        .routes(routes!(unlink))
}
