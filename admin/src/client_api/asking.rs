//! Who is asking. cMCP calls with a `service` key and may name the person
//! it acts for in `X-CMCP-Person`; a member key is bound to its own person
//! and may not name another; an admin key keeps its powers and may name a
//! person like a service does. Without a person the caller sees company
//! spaces only.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use cmcp_registry::{Role, Viewer};

use crate::AdminState;
use crate::auth::Caller;
use crate::error::AdminError;

pub const PERSON_HEADER: &str = "x-cmcp-person";

/// Longest person id accepted in the header or a path.
const MAX_PERSON_LEN: usize = 200;

/// An authenticated caller and the view it reads with.
#[derive(Debug, Clone)]
pub struct Asking {
    pub caller: Caller,
    pub viewer: Viewer,
}

/// A person id as given: trimmed, non-empty, short, no control characters.
pub fn person_id(raw: &str) -> Result<String, AdminError> {
    let p = raw.trim();
    if p.is_empty() || p.len() > MAX_PERSON_LEN || p.chars().any(char::is_control) {
        return Err(AdminError::BadRequest(format!(
            "a person id is 1 to {MAX_PERSON_LEN} printable characters"
        )));
    }
    Ok(p.to_owned())
}

/// The view of `caller` when it names `named` (or nobody).
pub fn viewer_for(caller: &Caller, named: Option<String>) -> Result<Viewer, AdminError> {
    let key = &caller.0;
    match key.role {
        Role::Service | Role::Admin => Ok(Viewer::person(named.as_deref())),
        Role::Member => match (named, key.person.as_deref()) {
            (None, own) => Ok(Viewer::person(own)),
            (Some(p), Some(own)) if p == own => Ok(Viewer::Person(p)),
            (Some(_), _) => Err(AdminError::Forbidden(
                "a member key acts only for its own person".to_owned(),
            )),
        },
    }
}

impl FromRequestParts<AdminState> for Asking {
    type Rejection = AdminError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AdminState,
    ) -> Result<Self, Self::Rejection> {
        let caller = Caller::from_request_parts(parts, state).await?;
        let named = match parts.headers.get(PERSON_HEADER) {
            None => None,
            Some(v) => Some(person_id(v.to_str().map_err(|_| {
                AdminError::BadRequest(format!("{PERSON_HEADER} is not text"))
            })?)?),
        };
        let viewer = viewer_for(&caller, named)?;
        Ok(Asking { caller, viewer })
    }
}
