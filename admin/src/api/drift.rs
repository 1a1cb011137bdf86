//! `GET /v1/drift`: what the latest reconcile of each connection found that
//! no webhook had delivered, and which connections miss changes night after
//! night.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use utoipa::IntoParams;

use super::ApiResult;
use super::extract::Params;
use super::views_conn::DriftList;
use crate::AdminState;
use crate::auth::{Caller, Need};
use crate::client_api::wire::ErrorBody;

#[derive(Debug, Deserialize, IntoParams)]
pub struct DriftQuery {
    /// Only this connection.
    pub connection: Option<String>,
}

#[utoipa::path(get, path = "/v1/drift", params(DriftQuery),
    responses((status = 200, description = "One line per connection: missed changes by kind, nights in a row, flag and hint", body = DriftList),
              (status = 400, description = "A bad query", body = ErrorBody),
              (status = 401, description = "No valid API key", body = ErrorBody),
              (status = 403, description = "Needs an admin key with the connections power", body = ErrorBody),
              (status = 404, description = "Unknown connection", body = ErrorBody)))]
pub async fn get_drift(
    State(st): State<AdminState>,
    caller: Caller,
    q: Params<DriftQuery>,
) -> ApiResult<DriftList> {
    caller.require(Need::Power(cmcp_registry::Power::Connections))?;
    let q = q.open()?;
    let lines = st.store.drift_report(q.connection.as_deref()).await?;
    Ok(Json(DriftList {
        items: lines.into_iter().map(Into::into).collect(),
    }))
}
