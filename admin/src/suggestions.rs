//! A person's suggestions over the API: list them, accept or decline one,
//! ask an ADMIN to create a project for a space nothing matches; and the
//! ADMINs' list of the requests people sent. A member key acts for its own
//! person, a service (or admin) key for the person in the path; nobody
//! reads another person's suggestions.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use cmcp_domain::SpaceAddress;
use cmcp_registry::{SuggestionAnswer, SuggestionRow};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::AdminState;
use crate::auth::{Caller, Need};
use crate::client_api::asking::{Asking, person_id, viewer_for};
use crate::client_api::wire::ErrorBody;
use crate::error::AdminError;

/// One suggestion (or request), as the person and the ADMINs read it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SuggestionView {
    pub id: i64,
    pub person: String,
    /// `link`, `request-to-join` or `request-to-create`.
    pub kind: String,
    /// `open`, `accepted` or `declined`.
    pub state: String,
    /// The person's private space.
    pub space: String,
    pub space_name: Option<String>,
    pub place_id: Option<String>,
    pub place_name: Option<String>,
    /// For a request to create: the project name asked for.
    pub create_name: Option<String>,
    pub confidence: i64,
    /// The evidence in words.
    pub evidence_text: Vec<String>,
    /// The evidence, typed (`kind` names the rung).
    #[schema(value_type = Vec<Object>)]
    pub evidence: serde_json::Value,
    pub decided_by: Option<String>,
    pub decided_at: Option<i64>,
}

impl From<SuggestionRow> for SuggestionView {
    fn from(r: SuggestionRow) -> Self {
        SuggestionView {
            id: r.id,
            person: r.person,
            kind: r.kind.to_string(),
            state: r.state.to_string(),
            space: r.space_address.to_string(),
            space_name: r.space_name,
            place_id: r.place_id,
            place_name: r.place_name,
            create_name: r.create_name,
            confidence: r.confidence,
            evidence_text: r.evidence_text,
            evidence: r.evidence,
            decided_by: r.decided_by,
            decided_at: r.decided_at,
        }
    }
}

/// `POST …/suggestions/{id}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecideSuggestion {
    /// `accept` or `decline`.
    pub decision: String,
}

/// `POST …/requests`: ask an ADMIN to create a cMCP project.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestCreate {
    /// The person's private space.
    pub space: String,
    /// The project's name; the space's name when absent.
    pub name: Option<String>,
}

/// The person in the path, when the caller may act for them.
fn acting_for(asking: &Asking, raw: &str) -> Result<String, AdminError> {
    let person = person_id(raw)?;
    viewer_for(&asking.caller, Some(person.clone()))?;
    Ok(person)
}

/// `accept` or `decline`.
pub fn answer(raw: &str) -> Result<SuggestionAnswer, AdminError> {
    match raw.trim() {
        "accept" => Ok(SuggestionAnswer::Accept),
        "decline" => Ok(SuggestionAnswer::Decline),
        other => Err(AdminError::BadRequest(format!(
            "decision {other:?} is neither accept nor decline"
        ))),
    }
}

/// `person` answers suggestion `id` (the API and the `/me` page).
pub async fn decide(
    st: &AdminState,
    person: &str,
    id: i64,
    answer: SuggestionAnswer,
    actor: &str,
) -> Result<SuggestionView, AdminError> {
    Ok(st
        .store
        .decide_suggestion(person, id, answer, actor)
        .await?
        .into())
}

#[utoipa::path(get, path = "/v1/people/{person}/suggestions",
    params(("person" = String, Path, description = "Person id")),
    responses((status = 200, description = "The person's suggestions, newest first", body = Vec<SuggestionView>),
              (status = 401, description = "No valid API key", body = ErrorBody),
              (status = 403, description = "A member key of another person", body = ErrorBody)))]
async fn list(
    State(st): State<AdminState>,
    asking: Asking,
    Path(person): Path<String>,
) -> Result<Json<Vec<SuggestionView>>, AdminError> {
    let person = acting_for(&asking, &person)?;
    let rows = st.store.list_suggestions(&person).await?;
    Ok(Json(rows.into_iter().map(Into::into).collect()))
}

#[utoipa::path(post, path = "/v1/people/{person}/suggestions/{id}", request_body = DecideSuggestion,
    params(("person" = String, Path, description = "Person id"),
           ("id" = i64, Path, description = "Suggestion id")),
    responses((status = 200, description = "Decided (audited); an accepted link shows in the person's manifest", body = SuggestionView),
              (status = 400, description = "Not accept or decline, or already decided", body = ErrorBody),
              (status = 401, description = "No valid API key", body = ErrorBody),
              (status = 403, description = "A member key of another person", body = ErrorBody),
              (status = 404, description = "No such suggestion of this person", body = ErrorBody)))]
async fn decide_one(
    State(st): State<AdminState>,
    asking: Asking,
    Path((person, id)): Path<(String, i64)>,
    Json(body): Json<DecideSuggestion>,
) -> Result<Json<SuggestionView>, AdminError> {
    let person = acting_for(&asking, &person)?;
    let answer = answer(&body.decision)?;
    Ok(Json(
        decide(&st, &person, id, answer, &asking.caller.actor()).await?,
    ))
}

#[utoipa::path(post, path = "/v1/people/{person}/requests", request_body = RequestCreate,
    params(("person" = String, Path, description = "Person id")),
    responses((status = 201, description = "Sent to the ADMINs (audited)", body = SuggestionView),
              (status = 400, description = "The space matches a place, or was already asked for", body = ErrorBody),
              (status = 401, description = "No valid API key", body = ErrorBody),
              (status = 403, description = "A member key of another person", body = ErrorBody),
              (status = 404, description = "Not a private space of this person", body = ErrorBody)))]
async fn request_create(
    State(st): State<AdminState>,
    asking: Asking,
    Path(person): Path<String>,
    Json(body): Json<RequestCreate>,
) -> Result<(StatusCode, Json<SuggestionView>), AdminError> {
    let person = acting_for(&asking, &person)?;
    let space: SpaceAddress = body
        .space
        .parse()
        .map_err(|e| AdminError::BadRequest(format!("space: {e}")))?;
    let row = st
        .store
        .request_create(
            &person,
            &space,
            body.name.as_deref(),
            &asking.caller.actor(),
        )
        .await?;
    Ok((StatusCode::CREATED, Json(row.into())))
}

#[utoipa::path(get, path = "/v1/requests",
    responses((status = 200, description = "Requests people sent: to join a place, to create a project; newest first", body = Vec<SuggestionView>),
              (status = 401, description = "No valid API key", body = ErrorBody),
              (status = 403, description = "Needs an admin key", body = ErrorBody)))]
async fn requests(
    State(st): State<AdminState>,
    caller: Caller,
) -> Result<Json<Vec<SuggestionView>>, AdminError> {
    caller.require(Need::Admin)?;
    let rows = st.store.list_requests().await?;
    Ok(Json(rows.into_iter().map(Into::into).collect()))
}

/// The suggestion routes, for the `/v1` router to merge.
pub fn routes() -> OpenApiRouter<AdminState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(decide_one))
        .routes(routes!(request_create))
        .routes(routes!(requests))
}
