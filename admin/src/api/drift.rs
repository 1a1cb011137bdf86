//! `GET /v1/drift`: what the latest reconcile of each connection found that
//! no webhook had delivered, and which connections miss changes night after
//! night.

use axum::Json;
use axum::extract::{Query, State};
use serde::Deserialize;
use serde_json::json;
use utoipa::IntoParams;

use super::ApiResult;
use crate::AdminState;
use crate::auth::{Caller, Need};

#[derive(Debug, Deserialize, IntoParams)]
pub struct DriftQuery {
    /// Only this connection.
    pub connection: Option<String>,
}

#[utoipa::path(get, path = "/v1/drift", params(DriftQuery),
    responses((status = 200, description = "One line per connection: missed changes by kind, nights in a row, flag and hint"),
              (status = 401, description = "No valid API key"),
              (status = 403, description = "Needs an admin key with the connections power"),
              (status = 404, description = "Unknown connection")))]
pub async fn get_drift(
    State(st): State<AdminState>,
    caller: Caller,
    Query(q): Query<DriftQuery>,
) -> ApiResult {
    caller.require(Need::Power(cmcp_registry::Power::Connections))?;
    let lines = st.store.drift_report(q.connection.as_deref()).await?;
    Ok(Json(json!({ "items": lines })))
}
