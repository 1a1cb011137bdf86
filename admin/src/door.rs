//! The way into a realm (the ADMIN's screen, a person's page): signing in
//! and out, and the session of a form POST. One path for both pages, so
//! the Origin check, the per-address sign-in limit and the CSRF check
//! cannot drift apart between them.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, State};
use axum::http::header::{LOCATION, RETRY_AFTER, SET_COOKIE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Router};
use cmcp_registry::ApiKeyRow;
use maud::Markup;

use crate::AdminState;
use crate::auth::hash_secret;
use crate::error::AdminError;
use crate::screen::{field, form_pairs};
use crate::session::{self, Realm, Session};

/// The client address axum gives when the server is run with it.
pub(crate) type Peer = Option<Extension<ConnectInfo<SocketAddr>>>;

/// What a page's door varies by.
pub(crate) struct Door {
    pub realm: Realm,
    /// A key of the realm's role that may also sign in here.
    pub admits: fn(&ApiKeyRow) -> bool,
    /// The words for a key that may not.
    pub refused: &'static str,
    /// The page's sign-in form, with a message.
    pub page: fn(Option<&str>) -> Markup,
    /// The page's own error answer.
    pub error: fn(AdminError) -> Response,
}

impl Door {
    /// `POST {path}/sign-in` and `POST {path}/sign-out` of the realm.
    pub fn routes(&'static self) -> Router<AdminState> {
        let path = self.realm.path;
        Router::new()
            .route(
                &format!("{path}/sign-in"),
                post(
                    move |State(st): State<AdminState>, peer: Peer, headers: HeaderMap, body: String| async move {
                        self.sign_in(&st, peer, &headers, &body).await
                    },
                ),
            )
            .route(
                &format!("{path}/sign-out"),
                post(
                    move |State(st): State<AdminState>, headers: HeaderMap, body: String| async move {
                        self.sign_out(&st, &headers, &body).await
                    },
                ),
            )
    }

    /// `POST …/sign-in`: a live key of the realm's role becomes a session
    /// cookie for the realm's path.
    pub async fn sign_in(
        &self,
        st: &AdminState,
        peer: Peer,
        headers: &HeaderMap,
        body: &str,
    ) -> Response {
        if let Err(e) = session::check_origin(headers) {
            return (self.error)(e);
        }
        if let Some(Extension(ConnectInfo(addr))) = peer
            && !st.sign_ins.allow(addr.ip(), std::time::Instant::now())
        {
            tracing::warn!(client = %addr.ip(), "sign-in attempts over the limit");
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [(RETRY_AFTER, "60")],
                (self.page)(Some(
                    "Too many sign-in attempts from this address; wait a minute.",
                )),
            )
                .into_response();
        }
        let pairs = form_pairs(body);
        let key = field(&pairs, "key").unwrap_or("").trim();
        let found = match st.store.key_by_hash(&hash_secret(key)).await {
            Ok(k) => k,
            Err(e) => return (self.error)(e.into()),
        };
        match found {
            Some(k) if k.role == self.realm.role && (self.admits)(&k) && !key.is_empty() => {
                match session::start(&st.store, &k.id).await {
                    Ok(sid) => (
                        StatusCode::SEE_OTHER,
                        [
                            (LOCATION, self.realm.path.to_owned()),
                            (SET_COOKIE, self.realm.set_cookie(&sid, st.secure_cookie)),
                        ],
                    )
                        .into_response(),
                    Err(e) => (self.error)(e),
                }
            }
            _ => (StatusCode::UNAUTHORIZED, (self.page)(Some(self.refused))).into_response(),
        }
    }

    /// The realm's session of a form POST, after the Origin and CSRF checks.
    pub async fn checked(
        &self,
        st: &AdminState,
        headers: &HeaderMap,
        pairs: &[(String, String)],
    ) -> Result<Session, AdminError> {
        session::check_origin(headers)?;
        let s = self
            .realm
            .current(&st.store, headers)
            .await?
            .ok_or(AdminError::Unauthorized)?;
        session::check_csrf(&s, field(pairs, "csrf"))?;
        Ok(s)
    }

    /// `POST …/sign-out`: ends the session and clears the cookie.
    pub async fn sign_out(&self, st: &AdminState, headers: &HeaderMap, body: &str) -> Response {
        let pairs = form_pairs(body);
        match self.checked(st, headers, &pairs).await {
            Ok(s) => match st.store.delete_session(&s.id_hash).await {
                Ok(()) => (
                    StatusCode::SEE_OTHER,
                    [
                        (LOCATION, self.realm.path.to_owned()),
                        (SET_COOKIE, self.realm.clear_cookie(st.secure_cookie)),
                    ],
                )
                    .into_response(),
                Err(e) => (self.error)(e.into()),
            },
            Err(e) => (self.error)(e),
        }
    }
}
