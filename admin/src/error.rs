//! API errors as JSON with the right status; internal details are logged,
//! never returned.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cmcp_registry::RegistryError;

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("an API key is required")]
    Unauthorized,
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    NotFound(String),
    /// What the caller asks for existed and is gone for good (a change-feed
    /// cursor older than the feed keeps).
    #[error("{0}")]
    Gone(String),
    /// The store could not be reached or had no free connection in time:
    /// the same call may well succeed shortly (`503` with `Retry-After`).
    #[error("the registry is busy or unreachable; try again shortly")]
    Unavailable(String),
    #[error("internal error")]
    Internal(String),
}

/// Seconds a caller is asked to wait after a `503`.
pub const RETRY_AFTER_SECS: u32 = 1;

impl From<RegistryError> for AdminError {
    fn from(e: RegistryError) -> Self {
        match e {
            RegistryError::Invalid { what } => AdminError::BadRequest(format!("invalid {what}")),
            RegistryError::NotFound { what } => AdminError::NotFound(format!("{what} not found")),
            gone @ RegistryError::FeedPruned { .. } => AdminError::Gone(gone.to_string()),
            RegistryError::AlreadyExists { what } => {
                AdminError::BadRequest(format!("{what} already exists"))
            }
            busy if busy.is_transient() => AdminError::Unavailable(busy.to_string()),
            other => AdminError::Internal(other.to_string()),
        }
    }
}

/// A name outside its set (a role, a power, a status, a state) is the
/// caller's mistake; the message lists the known values.
impl From<cmcp_domain::UnknownName> for AdminError {
    fn from(e: cmcp_domain::UnknownName) -> Self {
        AdminError::BadRequest(e.to_string())
    }
}

impl From<cmcp_matching::MatchingError> for AdminError {
    fn from(e: cmcp_matching::MatchingError) -> Self {
        match e {
            cmcp_matching::MatchingError::Registry(r) => r.into(),
        }
    }
}

impl AdminError {
    /// Logs what the answer does not say (the details of a 500 or a 503).
    pub(crate) fn log(&self) {
        match self {
            AdminError::Internal(detail) => tracing::error!(%detail, "admin request failed"),
            AdminError::Unavailable(detail) => {
                tracing::warn!(%detail, "admin request refused: the registry is busy or unreachable");
            }
            _ => {}
        }
    }

    /// A `503` tells when to try again.
    pub(crate) fn add_retry_after(&self, resp: &mut Response) {
        if matches!(self, AdminError::Unavailable(_)) {
            resp.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(RETRY_AFTER_SECS),
            );
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            AdminError::Unauthorized => StatusCode::UNAUTHORIZED,
            AdminError::Forbidden(_) => StatusCode::FORBIDDEN,
            AdminError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AdminError::NotFound(_) => StatusCode::NOT_FOUND,
            AdminError::Gone(_) => StatusCode::GONE,
            AdminError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            AdminError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        self.log();
        let status = self.status();
        let mut resp = (
            status,
            Json(serde_json::json!({ "error": self.to_string() })),
        )
            .into_response();
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        self.add_retry_after(&mut resp);
        resp
    }
}
