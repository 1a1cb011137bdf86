//! Query strings and JSON bodies read so that every refusal is the API's
//! own `{"error": …}` 400, never axum's plain-text rejection, and only
//! after the route has checked who is asking: the extractors never reject;
//! the handler opens them after `require`.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::AdminError;

/// The query string as `T`, or why it is not one.
pub struct Params<T>(Result<T, AdminError>);

impl<T> Params<T> {
    pub fn open(self) -> Result<T, AdminError> {
        self.0
    }
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Params<T> {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Params(
            axum::extract::Query::<T>::try_from_uri(&parts.uri)
                .map(|q| q.0)
                .map_err(|e| AdminError::BadRequest(e.body_text())),
        ))
    }
}

/// The JSON body as `T`, or why it is not one. An empty body is `None`.
pub struct Body<T>(Result<Option<T>, AdminError>);

impl<T> Body<T> {
    /// The body, which the route requires.
    pub fn open(self) -> Result<T, AdminError> {
        self.0?
            .ok_or_else(|| AdminError::BadRequest("a JSON body is required".to_owned()))
    }

    /// The body, or `T::default()` when none was sent.
    pub fn open_or_default(self) -> Result<T, AdminError>
    where
        T: Default,
    {
        Ok(self.0?.unwrap_or_default())
    }
}

fn is_json(req: &Request) -> bool {
    let Some(ct) = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = ct.split(';').next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case("application/json")
        || essence.to_ascii_lowercase().ends_with("+json")
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = std::convert::Infallible;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let json = is_json(&req);
        let bytes = match axum::body::Bytes::from_request(req, state).await {
            Ok(b) => b,
            Err(e) => {
                return Ok(Body(Err(AdminError::BadRequest(format!(
                    "the body could not be read: {}",
                    e.body_text()
                )))));
            }
        };
        if bytes.is_empty() {
            return Ok(Body(Ok(None)));
        }
        if !json {
            return Ok(Body(Err(AdminError::BadRequest(
                "send the body as application/json".to_owned(),
            ))));
        }
        Ok(Body(serde_json::from_slice(&bytes).map(Some).map_err(
            |e| AdminError::BadRequest(format!("bad JSON body: {e}")),
        )))
    }
}
