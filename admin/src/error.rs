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
    #[error("internal error")]
    Internal(String),
}

impl From<RegistryError> for AdminError {
    fn from(e: RegistryError) -> Self {
        match e {
            RegistryError::Invalid { what } => AdminError::BadRequest(format!("invalid {what}")),
            RegistryError::NotFound { what } => AdminError::NotFound(format!("{what} not found")),
            gone @ RegistryError::FeedPruned { .. } => AdminError::Gone(gone.to_string()),
            RegistryError::AlreadyExists { what } => {
                AdminError::BadRequest(format!("{what} already exists"))
            }
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
    pub fn status(&self) -> StatusCode {
        match self {
            AdminError::Unauthorized => StatusCode::UNAUTHORIZED,
            AdminError::Forbidden(_) => StatusCode::FORBIDDEN,
            AdminError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AdminError::NotFound(_) => StatusCode::NOT_FOUND,
            AdminError::Gone(_) => StatusCode::GONE,
            AdminError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        if let AdminError::Internal(detail) = &self {
            tracing::error!(%detail, "admin request failed");
        }
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
        resp
    }
}
