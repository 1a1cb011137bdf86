//! `/v1/deliveries`: the webhook deliveries an ADMIN can see and give back
//! to the workers, the twin of `cmcp-discovery deliveries …`. Deliveries
//! belong to connections, so every route needs the connections power; a
//! replay is audited with the key that asked.

use axum::Json;
use axum::extract::{Path, Query, State};
use cmcp_registry::{DeliveryFilter, DeliveryStatus, Power};
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::AdminState;
use crate::auth::{Caller, Need};
use crate::error::AdminError;

type ApiResult = Result<Json<Value>, AdminError>;

#[derive(Debug, Deserialize, IntoParams)]
pub struct DeliveryQuery {
    /// received, processed, failed or ignored.
    pub state: Option<String>,
    pub connection: Option<String>,
    /// At most this many, newest first (1–1000, default 100).
    pub limit: Option<usize>,
}

#[utoipa::path(get, path = "/v1/deliveries", params(DeliveryQuery),
    responses((status = 200, description = "Deliveries, newest first, with state, attempts and last error"),
              (status = 401, description = "No valid API key"),
              (status = 403, description = "Needs an admin key with the connections power")))]
async fn list_deliveries(
    State(st): State<AdminState>,
    caller: Caller,
    Query(q): Query<DeliveryQuery>,
) -> ApiResult {
    caller.require(Need::Power(Power::Connections))?;
    let status = q
        .state
        .as_deref()
        .map(str::parse::<DeliveryStatus>)
        .transpose()?;
    let rows = st
        .store
        .find_deliveries(&DeliveryFilter {
            status,
            connection_id: q.connection,
            limit: q.limit.unwrap_or(100),
        })
        .await?;
    Ok(Json(json!({ "items": rows })))
}

#[utoipa::path(get, path = "/v1/deliveries/{id}",
    params(("id" = String, Path, description = "Delivery id")),
    responses((status = 200, description = "One delivery (its headers, never its body)"),
              (status = 401, description = "No valid API key"),
              (status = 403, description = "Needs an admin key with the connections power"),
              (status = 404, description = "No such delivery")))]
async fn show_delivery(
    State(st): State<AdminState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult {
    caller.require(Need::Power(Power::Connections))?;
    Ok(Json(json!(st.store.get_delivery(&id).await?)))
}

#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct ReplayBody {
    pub reason: Option<String>,
}

#[utoipa::path(post, path = "/v1/deliveries/{id}/replay", request_body = ReplayBody,
    params(("id" = String, Path, description = "Delivery id")),
    responses((status = 200, description = "Queued again (audited)"),
              (status = 400, description = "Not failed or processed"),
              (status = 401, description = "No valid API key"),
              (status = 403, description = "Needs an admin key with the connections power")))]
async fn replay_delivery(
    State(st): State<AdminState>,
    caller: Caller,
    Path(id): Path<String>,
    body: Option<Json<Value>>,
) -> ApiResult {
    caller.require(Need::Power(Power::Connections))?;
    let body: ReplayBody = match body {
        Some(b) => {
            serde_json::from_value(b.0).map_err(|e| AdminError::BadRequest(e.to_string()))?
        }
        None => ReplayBody::default(),
    };
    let job_id = st
        .store
        .replay_delivery(&id, &caller.actor(), body.reason.as_deref())
        .await?;
    Ok(Json(
        json!({ "id": id, "status": "received", "job_id": job_id }),
    ))
}

/// The delivery routes, merged into the `/v1` router and its document.
pub fn routes() -> OpenApiRouter<AdminState> {
    OpenApiRouter::new()
        .routes(routes!(list_deliveries))
        .routes(routes!(show_delivery))
        .routes(routes!(replay_delivery))
}
