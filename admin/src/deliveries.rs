//! `/v1/deliveries`: the webhook deliveries an ADMIN can see and give back
//! to the workers, the twin of `cmcp-discovery deliveries …`. Deliveries
//! belong to connections, so every route needs the connections power; a
//! replay is audited with the key that asked.

use axum::Json;
use axum::extract::{Path, State};
use cmcp_registry::{DeliveryFilter, DeliveryStatus, Power};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::AdminState;
use crate::api::ApiResult;
use crate::api::extract::{Body, Params};
use crate::api::views_conn::{DeliveryList, DeliveryView, ReplayResponse};
use crate::auth::{Caller, Need};
use crate::client_api::wire::ErrorBody;

#[derive(Debug, Deserialize, IntoParams)]
pub struct DeliveryQuery {
    /// received, processed, failed or ignored.
    pub state: Option<String>,
    pub connection: Option<String>,
    /// At most this many, newest first (1–1000, default 100).
    pub limit: Option<usize>,
}

#[utoipa::path(get, path = "/v1/deliveries", params(DeliveryQuery),
    responses((status = 200, description = "Deliveries, newest first, with state, attempts and last error", body = DeliveryList),
              (status = 400, description = "A bad query: an unknown state, a limit that is not a number", body = ErrorBody),
              (status = 401, description = "No valid API key", body = ErrorBody),
              (status = 403, description = "Needs an admin key with the connections power", body = ErrorBody)))]
async fn list_deliveries(
    State(st): State<AdminState>,
    caller: Caller,
    q: Params<DeliveryQuery>,
) -> ApiResult<DeliveryList> {
    caller.require(Need::Power(Power::Connections))?;
    let q = q.open()?;
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
    Ok(Json(DeliveryList {
        items: rows.into_iter().map(Into::into).collect(),
    }))
}

#[utoipa::path(get, path = "/v1/deliveries/{id}",
    params(("id" = String, Path, description = "Delivery id")),
    responses((status = 200, description = "One delivery (its headers, never its body)", body = DeliveryView),
              (status = 401, description = "No valid API key", body = ErrorBody),
              (status = 403, description = "Needs an admin key with the connections power", body = ErrorBody),
              (status = 404, description = "No such delivery", body = ErrorBody)))]
async fn show_delivery(
    State(st): State<AdminState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<DeliveryView> {
    caller.require(Need::Power(Power::Connections))?;
    Ok(Json(st.store.get_delivery(&id).await?.into()))
}

#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct ReplayBody {
    pub reason: Option<String>,
}

#[utoipa::path(post, path = "/v1/deliveries/{id}/replay", request_body = ReplayBody,
    params(("id" = String, Path, description = "Delivery id")),
    responses((status = 200, description = "Queued again (audited)", body = ReplayResponse),
              (status = 400, description = "A bad body, or the delivery is not failed or processed", body = ErrorBody),
              (status = 401, description = "No valid API key", body = ErrorBody),
              (status = 403, description = "Needs an admin key with the connections power", body = ErrorBody),
              (status = 404, description = "No such delivery", body = ErrorBody)))]
async fn replay_delivery(
    State(st): State<AdminState>,
    caller: Caller,
    Path(id): Path<String>,
    body: Body<ReplayBody>,
) -> ApiResult<ReplayResponse> {
    caller.require(Need::Power(Power::Connections))?;
    let body = body.open_or_default()?;
    let job_id = st
        .store
        .replay_delivery(&id, &caller.actor(), body.reason.as_deref())
        .await?;
    Ok(Json(ReplayResponse {
        id,
        status: DeliveryStatus::Received.as_str().to_owned(),
        job_id,
    }))
}

/// The delivery routes, merged into the `/v1` router and its document.
pub fn routes() -> OpenApiRouter<AdminState> {
    OpenApiRouter::new()
        .routes(routes!(list_deliveries))
        .routes(routes!(show_delivery))
        .routes(routes!(replay_delivery))
}
