//! The ADMIN's JSON API (`/v1/…`), described by the OpenAPI document at
//! `/v1/openapi.json`. Every route authenticates the caller first (401) and
//! then checks the role and named power it needs (403), before reading any
//! query or body.

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use cmcp_domain::ConnectionStatus;
use cmcp_registry::{Decision, PlaceInput, Power, ProposalFilter};
use serde::Deserialize;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{IntoParams, Modify, OpenApi, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

mod drift;
pub mod extract;
pub mod views;
pub mod views_conn;

use crate::AdminState;
use crate::auth::{Caller, Need};
use crate::client_api::wire::ErrorBody;
use crate::error::AdminError;
use extract::{Body, Params};
use views::{AuditList, DecideResponse, MappingList, ProposalList, PutPlacesResponse};
use views_conn::{ConnectionList, ConnectionOverview, StatusResponse};

/// A route's answer: a typed body, or an error as `{"error": …}`.
pub type ApiResult<T> = Result<Json<T>, AdminError>;

#[derive(OpenApi)]
#[openapi(
    info(title = "cmcp-discovery admin API", description = "Mapping proposals, mappings, places, connections and the audit log. Bearer API keys."),
    modifiers(&BearerAuth),
    security(("api_key" = []))
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

#[derive(Debug, Deserialize, IntoParams)]
pub struct ProposalQuery {
    /// proposed, approved, rejected or superseded.
    pub state: Option<String>,
    /// github, bitbucket, jira or drive.
    pub platform: Option<String>,
    pub min_confidence: Option<i64>,
    pub max_confidence: Option<i64>,
    /// Substring of the space name, target or evidence.
    pub text: Option<String>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
}

#[utoipa::path(get, path = "/v1/proposals", params(ProposalQuery),
    responses((status = 200, description = "Proposals with their evidence in words", body = ProposalList),
              (status = 400, description = "A bad query: an unknown state or platform, a number that is not one", body = ErrorBody),
              (status = 401, description = "No valid API key", body = ErrorBody),
              (status = 403, description = "Needs an admin key with the mappings power", body = ErrorBody)))]
async fn list_proposals(
    State(st): State<AdminState>,
    caller: Caller,
    q: Params<ProposalQuery>,
) -> ApiResult<ProposalList> {
    caller.require(Need::Power(Power::Mappings))?;
    let q = q.open()?;
    let filter = ProposalFilter {
        state: q.state.as_deref().map(str::parse).transpose()?,
        platform: q.platform.as_deref().map(str::parse).transpose()?,
        min_confidence: q.min_confidence,
        max_confidence: q.max_confidence,
        text: q.text,
        limit: q.limit.unwrap_or(100).clamp(1, 5000),
        offset: q.offset.unwrap_or(0),
    };
    let total = st.store.count_proposals(&filter).await?;
    let items = st.store.list_proposals(&filter).await?;
    Ok(Json(ProposalList {
        total,
        items: views::proposals(items),
    }))
}

#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DecisionBody {
    Approve,
    Reject,
    Undo,
}

impl From<DecisionBody> for Decision {
    fn from(d: DecisionBody) -> Self {
        match d {
            DecisionBody::Approve => Decision::Approve,
            DecisionBody::Reject => Decision::Reject,
            DecisionBody::Undo => Decision::Undo,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct DecideBody {
    pub ids: Vec<i64>,
    pub decision: DecisionBody,
    /// Why; required to reject or undo.
    pub reason: Option<String>,
}

/// Decide proposals in bulk: one transaction, all or nothing.
pub async fn decide(
    st: &AdminState,
    caller_actor: &str,
    body: &DecideBody,
) -> Result<Vec<cmcp_registry::ProposalRow>, AdminError> {
    let reason = body
        .reason
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty());
    if reason.is_none() && !matches!(body.decision, DecisionBody::Approve) {
        return Err(AdminError::BadRequest(
            "a reason is required to reject or undo".to_owned(),
        ));
    }
    if body.ids.is_empty() {
        return Err(AdminError::BadRequest("no proposals selected".to_owned()));
    }
    let decision: Decision = body.decision.into();
    let decided = st
        .store
        .decide_proposals(&body.ids, decision, caller_actor, reason)
        .await?;
    // An approval or an undo changed mappings: the people they reach see
    // it in their suggestions now, not after their next sync. The decisions
    // stand whatever happens here (the next sync of each person's
    // connection refreshes theirs again).
    if matches!(decision, Decision::Approve | Decision::Undo) {
        let containers: Vec<String> = decided.iter().map(|p| p.container.to_string()).collect();
        match cmcp_matching::refresh_suggestions_after_decision(&st.store, &containers).await {
            Ok(people) => {
                tracing::info!(
                    people = people.len(),
                    "suggestions refreshed after a decision"
                );
            }
            Err(e) => tracing::warn!(error = %e, "could not refresh suggestions after a decision"),
        }
    }
    Ok(decided)
}

#[utoipa::path(post, path = "/v1/proposals/decisions", request_body = DecideBody,
    responses((status = 200, description = "Every proposal decided, each with its audit entry", body = DecideResponse),
              (status = 400, description = "A bad body, or an item is invalid; nothing was decided", body = ErrorBody),
              (status = 401, description = "No valid API key", body = ErrorBody),
              (status = 403, description = "Needs an admin key with the mappings power", body = ErrorBody),
              (status = 404, description = "No proposal has one of the ids; nothing was decided", body = ErrorBody)))]
async fn decide_proposals(
    State(st): State<AdminState>,
    caller: Caller,
    body: Body<DecideBody>,
) -> ApiResult<DecideResponse> {
    caller.require(Need::Power(Power::Mappings))?;
    let decided = decide(&st, &caller.actor(), &body.open()?).await?;
    Ok(Json(DecideResponse {
        decided: decided.len(),
        items: views::proposals(decided),
    }))
}

#[utoipa::path(get, path = "/v1/mappings",
    responses((status = 200, description = "Approved mappings", body = MappingList),
              (status = 401, description = "No valid API key", body = ErrorBody),
              (status = 403, description = "Needs an admin key with the mappings power", body = ErrorBody)))]
async fn list_mappings(State(st): State<AdminState>, caller: Caller) -> ApiResult<MappingList> {
    caller.require(Need::Power(Power::Mappings))?;
    let rows = st.store.list_mappings().await?;
    Ok(Json(MappingList {
        items: rows.into_iter().map(Into::into).collect(),
    }))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct PlaceBody {
    pub id: String,
    /// project, team or client.
    pub kind: String,
    pub name: String,
    pub key: Option<String>,
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Person ids that belong to the place; absent keeps its members.
    pub members: Option<Vec<String>>,
}

#[utoipa::path(put, path = "/v1/places", request_body = Vec<PlaceBody>,
    responses((status = 200, description = "The complete set loaded; places not in it are retired", body = PutPlacesResponse),
              (status = 400, description = "A bad body or an invalid place; nothing loaded", body = ErrorBody),
              (status = 401, description = "No valid API key", body = ErrorBody),
              (status = 403, description = "Needs an admin key with the mappings power", body = ErrorBody)))]
async fn put_places(
    State(st): State<AdminState>,
    caller: Caller,
    body: Body<Vec<PlaceInput>>,
) -> ApiResult<PutPlacesResponse> {
    caller.require(Need::Power(Power::Mappings))?;
    let places = body.open()?;
    let figures = st.store.put_places(&places, &caller.actor()).await?;
    let proposals = cmcp_matching::refresh_proposals(&st.store, &st.matching).await?;
    // Who belongs where decides link or request to join.
    let suggestions = cmcp_matching::refresh_all_suggestions(&st.store).await?;
    Ok(Json(PutPlacesResponse::new(
        figures,
        proposals,
        &suggestions,
    )))
}

/// Connections with their status, risks, last run and rate budget: the
/// shared budget of the connection's credential as the fleet last learned it
/// (`remaining`, `request_limit`, `reset_at`, `paused_until` in epoch
/// milliseconds), or null before the connection has sent a request.
pub async fn connections_overview(st: &AdminState) -> Result<Vec<ConnectionOverview>, AdminError> {
    let mut budgets: std::collections::HashMap<String, cmcp_registry::BudgetRow> =
        st.store.connection_budgets().await?.into_iter().collect();
    let mut out = Vec::new();
    for c in st.store.list_connections().await? {
        let last = st.store.last_run(&c.id).await?;
        let budget = budgets.remove(&c.id);
        out.push(ConnectionOverview {
            connection: c.into(),
            last_run: last.map(Into::into),
            rate_budget: budget.map(Into::into),
        });
    }
    Ok(out)
}

#[utoipa::path(get, path = "/v1/connections",
    responses((status = 200, description = "Connections with status, risk notices, last run and rate budget (remaining, limit, reset time)", body = ConnectionList),
              (status = 401, description = "No valid API key", body = ErrorBody),
              (status = 403, description = "Needs an admin key with the connections power", body = ErrorBody)))]
async fn list_connections(
    State(st): State<AdminState>,
    caller: Caller,
) -> ApiResult<ConnectionList> {
    caller.require(Need::Power(Power::Connections))?;
    Ok(Json(ConnectionList {
        items: connections_overview(&st).await?,
    }))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct StatusBody {
    /// enabled or disabled.
    pub status: String,
    pub reason: Option<String>,
}

#[utoipa::path(post, path = "/v1/connections/{id}/status", request_body = StatusBody,
    params(("id" = String, Path, description = "Connection id")),
    responses((status = 200, description = "Status set (audited)", body = StatusResponse),
              (status = 400, description = "A bad body, an unknown status, or unlinking (the person's own act)", body = ErrorBody),
              (status = 401, description = "No valid API key", body = ErrorBody),
              (status = 403, description = "Needs an admin key with the connections power", body = ErrorBody),
              (status = 404, description = "No such connection", body = ErrorBody)))]
async fn set_connection_status(
    State(st): State<AdminState>,
    caller: Caller,
    Path(id): Path<String>,
    body: Body<StatusBody>,
) -> ApiResult<StatusResponse> {
    caller.require(Need::Power(Power::Connections))?;
    let body = body.open()?;
    let status: ConnectionStatus = body.status.parse()?;
    let changed = st
        .store
        .set_connection_status(&id, status, &caller.actor(), body.reason.as_deref())
        .await?;
    Ok(Json(StatusResponse {
        id,
        status: status.as_str().to_owned(),
        changed,
    }))
}

#[derive(Debug, Deserialize, IntoParams)]
pub struct AuditQuery {
    pub limit: Option<i64>,
}

#[utoipa::path(get, path = "/v1/audit", params(AuditQuery),
    responses((status = 200, description = "The audit log, newest first", body = AuditList),
              (status = 400, description = "A bad query", body = ErrorBody),
              (status = 401, description = "No valid API key", body = ErrorBody),
              (status = 403, description = "Needs an admin key", body = ErrorBody)))]
async fn list_audit(
    State(st): State<AdminState>,
    caller: Caller,
    q: Params<AuditQuery>,
) -> ApiResult<AuditList> {
    caller.require(Need::Admin)?;
    let limit = q.open()?.limit.unwrap_or(100).clamp(1, 10_000);
    let rows = st.store.list_audit(limit).await?;
    Ok(Json(AuditList {
        items: rows.into_iter().map(Into::into).collect(),
    }))
}

/// The `/v1` routes and their document, before state.
fn parts() -> (Router<AdminState>, utoipa::openapi::OpenApi) {
    let (router, mut doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(list_proposals))
        .routes(routes!(decide_proposals))
        .routes(routes!(list_mappings))
        .routes(routes!(put_places))
        .routes(routes!(list_connections))
        .routes(routes!(set_connection_status))
        .routes(routes!(list_audit))
        .routes(routes!(drift::get_drift))
        .merge(crate::client_api::routes())
        .merge(crate::deliveries::routes())
        .merge(crate::people::routes())
        .merge(crate::suggestions::routes())
        .split_for_parts();
    crate::client_api::document_errors(&mut doc);
    (router, doc)
}

/// The OpenAPI document served at `/v1/openapi.json`.
pub fn openapi() -> utoipa::openapi::OpenApi {
    parts().1
}

/// The `/v1` routes and the OpenAPI document describing them.
pub fn router(state: AdminState) -> Router {
    let (router, doc) = parts();
    let doc = std::sync::Arc::new(doc);
    router
        .route(
            "/v1/openapi.json",
            get(move || async move { Json(doc.as_ref().clone()) }),
        )
        .with_state(state)
}
