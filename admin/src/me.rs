//! A person's page at `/me`, signed in with their member key: the accounts
//! they linked (with the risks of each token), their private spaces, and
//! their suggestions to accept or decline; a space nothing matches can be
//! put to an ADMIN as a project to create. The same rules as `/admin`:
//! server-rendered, no JavaScript, maud escapes every upstream string,
//! every POST checks Origin and the CSRF token, and the same strict
//! headers. Each action is the one its `/v1/people/{person}/…` twin does.

use std::collections::HashSet;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use cmcp_domain::SpaceAddress;
use cmcp_registry::SuggestionState;
use maud::{Markup, html};
use serde::Deserialize;

use crate::AdminState;
use crate::auth::actor_of;
use crate::door::Door;
use crate::error::AdminError;
use crate::people::linked_accounts;
use crate::screen::{field, form_pairs, layout, redirect, strict_headers};
use crate::session::{ME, Session};
use crate::suggestions::{answer, decide};

const TITLE: &str = "cmcp-discovery: your spaces";

pub fn router(state: AdminState) -> Router {
    strict_headers(
        Router::new()
            .route("/me", get(page))
            .merge(DOOR.routes())
            .route("/me/decide", post(decide_form))
            .route("/me/request", post(request_form))
            .with_state(state),
    )
}

fn html_error(e: AdminError) -> Response {
    e.log();
    let status = e.status();
    let body = layout(
        TITLE,
        html! {
            h1 { "Not done" }
            p { (e.to_string()) }
            p { a href="/me" { "Back" } }
        },
    );
    let mut resp = (status, body).into_response();
    e.add_retry_after(&mut resp);
    resp
}

fn sign_in_page(message: Option<&str>) -> Markup {
    layout(
        TITLE,
        html! {
            h1 { "Your spaces" }
            @if let Some(m) = message { p.msg { (m) } }
            form method="post" action="/me/sign-in" {
                label { "Member key " input type="password" name="key" autocomplete="off" required; }
                " "
                button type="submit" id="sign-in" { "Sign in" }
            }
        },
    )
}

/// The person a session acts for: a member key is bound to one.
fn person_of(s: &Session) -> Result<&str, AdminError> {
    s.row
        .key
        .person
        .as_deref()
        .ok_or_else(|| AdminError::Forbidden("this member key names no person".to_owned()))
}

#[derive(Debug, Deserialize)]
pub struct PageQuery {
    pub msg: Option<String>,
}

async fn page(
    State(st): State<AdminState>,
    headers: HeaderMap,
    Query(q): Query<PageQuery>,
) -> Response {
    match render(&st, &headers, &q).await {
        Ok(r) => r,
        Err(e) => html_error(e),
    }
}

async fn render(
    st: &AdminState,
    headers: &HeaderMap,
    q: &PageQuery,
) -> Result<Response, AdminError> {
    let Some(s) = ME.current(&st.store, headers).await? else {
        return Ok(sign_in_page(None).into_response());
    };
    let person = person_of(&s)?;
    let accounts = linked_accounts(st, person).await?;
    let spaces = st.store.person_match_spaces(person).await?;
    let suggestions = st.store.list_suggestions(person).await?;
    // A space with a live suggestion matches a place: no "create" for it.
    let matched: HashSet<String> = suggestions
        .iter()
        .filter(|g| g.state != SuggestionState::Declined)
        .map(|g| g.space_address.to_string())
        .collect();
    let body = html! {
        h1 { "Your spaces" }
        form method="post" action="/me/sign-out" {
            "Signed in as " (person) " "
            input type="hidden" name="csrf" value=(s.csrf);
            button type="submit" { "Sign out" }
        }
        @if let Some(m) = &q.msg { p.msg { (m) } }
        h2 { "Linked accounts" }
        @if accounts.is_empty() { p { "No account linked." } }
        @else { table {
            tr { th { "Connection" } th { "Account" } th { "Risks" } }
            @for a in &accounts {
                tr data-account=(a.connection_id) {
                    td { (a.connection_id) }
                    td { (a.platform) " " (a.login) br; small { (a.base_url) } }
                    td.risks { ul { @for r in &a.risks { li { (r.message) } } } }
                }
            }
        } }
        h2 { "Suggestions" }
        @if suggestions.is_empty() { p { "Nothing to suggest." } }
        @else { table {
            tr { th { "Your space" } th { "Suggestion" } th { "Confidence" } th { "Evidence" } th { "" } }
            @for g in &suggestions {
                tr data-suggestion=(g.id) {
                    td { (g.space_name.as_deref().unwrap_or_default()) br; small { (g.space_address.to_string()) } }
                    td { (g.kind) " "
                        @if let Some(p) = &g.place_name { (p) } @else if let Some(p) = &g.place_id { (p) }
                        @if let Some(n) = &g.create_name { "project " (n) } }
                    td { (g.confidence) }
                    td { ul { @for line in &g.evidence_text { li { (line) } } } }
                    td.state {
                        @if g.state == SuggestionState::Open {
                            form method="post" action="/me/decide" {
                                input type="hidden" name="csrf" value=(s.csrf);
                                input type="hidden" name="id" value=(g.id);
                                button type="submit" name="decision" value="accept" id={"accept-" (g.id)} { "Accept" }
                                " "
                                button type="submit" name="decision" value="decline" id={"decline-" (g.id)} { "Decline" }
                            }
                        } @else { (g.state) }
                    }
                }
            }
        } }
        h2 { "Private spaces" }
        @if spaces.is_empty() { p { "No private space." } }
        @else { table {
            tr { th { "Space" } th { "" } }
            @for sp in &spaces {
                tr data-space=(sp.address) {
                    td { (sp.display_name) br; small { (sp.address) } }
                    td { @if !matched.contains(&sp.address) {
                        form method="post" action="/me/request" {
                            input type="hidden" name="csrf" value=(s.csrf);
                            input type="hidden" name="space" value=(sp.address);
                            input type="text" name="name" placeholder="project name";
                            " "
                            button type="submit" { "Ask an ADMIN to create a project" }
                        }
                    } }
                }
            }
        } }
    };
    Ok(layout(TITLE, body).into_response())
}

/// The way into this page.
static DOOR: Door = Door {
    realm: ME,
    admits: |k| k.person.is_some(),
    refused: "That is not a live member key of a person.",
    page: sign_in_page,
    error: html_error,
};

fn back_with(msg: &str) -> String {
    let msg: String = url::form_urlencoded::byte_serialize(msg.as_bytes()).collect();
    format!("/me?msg={msg}")
}

async fn decide_form(State(st): State<AdminState>, headers: HeaderMap, body: String) -> Response {
    let pairs = form_pairs(&body);
    let run = async {
        let s = DOOR.checked(&st, &headers, &pairs).await?;
        let person = person_of(&s)?;
        let id: i64 = field(&pairs, "id")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| AdminError::BadRequest("bad suggestion id".to_owned()))?;
        let answer = answer(field(&pairs, "decision").unwrap_or(""))?;
        let done = decide(&st, person, id, answer, &actor_of(&s.row.key)).await?;
        Ok::<_, AdminError>(format!("suggestion {id} ({}): {}", done.kind, done.state))
    };
    match run.await {
        Ok(msg) => redirect(&back_with(&msg)),
        Err(e) => html_error(e),
    }
}

async fn request_form(State(st): State<AdminState>, headers: HeaderMap, body: String) -> Response {
    let pairs = form_pairs(&body);
    let run = async {
        let s = DOOR.checked(&st, &headers, &pairs).await?;
        let person = person_of(&s)?;
        let space: SpaceAddress = field(&pairs, "space")
            .unwrap_or("")
            .parse()
            .map_err(|e| AdminError::BadRequest(format!("space: {e}")))?;
        let name = field(&pairs, "name");
        let row = st
            .store
            .request_create(person, &space, name, &actor_of(&s.row.key))
            .await?;
        Ok::<_, AdminError>(format!(
            "asked an ADMIN to create project {}",
            row.create_name.unwrap_or_default()
        ))
    };
    match run.await {
        Ok(msg) => redirect(&back_with(&msg)),
        Err(e) => html_error(e),
    }
}
