//! The ADMIN's one screen at `/admin`: server-rendered HTML forms, no
//! JavaScript. Pending proposals grouped by platform and confidence with
//! their evidence in words, decided in bulk with a reason; decided ones
//! with undo; connections with status, risks, last run and rate budget.
//! maud escapes every upstream string; every POST checks Origin and the
//! CSRF token.

use std::collections::BTreeMap;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::header::LOCATION;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use cmcp_domain::ConnectionStatus;
use cmcp_registry::{Power, ProposalFilter, ProposalRow, ProposalState};
use maud::{DOCTYPE, Markup, html};
use serde::Deserialize;

use crate::AdminState;
use crate::api::views_conn::BudgetView;
use crate::api::{DecideBody, DecisionBody, connections_overview, decide};
use crate::auth::actor_of;
use crate::door::Door;
use crate::error::AdminError;
use crate::session;

pub const PAGE_SIZE: i64 = 100;

/// The last page the screen serves (a million proposals); a larger `page`
/// shows this one instead of overflowing the offset.
pub const MAX_PAGE: i64 = 10_000;

/// No script, no frames, nothing from elsewhere: the page is server-rendered
/// HTML with one inline style block, and forms post to itself only.
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; \
                   frame-ancestors 'none'; base-uri 'none'";

pub fn router(state: AdminState) -> Router {
    strict_headers(
        Router::new()
            .route("/admin", get(screen))
            .merge(DOOR.routes())
            .route("/admin/decide", post(decide_form))
            .route("/admin/connection", post(connection_form))
            .with_state(state),
    )
}

/// The headers of every server-rendered page: the CSP above, no framing,
/// no sniffing (`/admin` and `/me` alike).
pub(crate) fn strict_headers(router: Router) -> Router {
    use axum::http::{HeaderValue, header};
    use tower_http::set_header::SetResponseHeaderLayer;
    router
        .layer(SetResponseHeaderLayer::overriding(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::X_FRAME_OPTIONS,
            HeaderValue::from_static("DENY"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ))
}

pub(crate) fn layout(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (title) }
                style { "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;margin-bottom:1em}td,th{border:1px solid #ccc;padding:.3em .5em;vertical-align:top}.conflict{color:#b00}.msg{background:#ffd;padding:.5em}" }
            }
            body { (body) }
        }
    }
}

fn html_error(e: AdminError) -> Response {
    e.log();
    let status = e.status();
    let body = layout(
        "cmcp-discovery admin",
        html! {
            h1 { "Not done" }
            p { (e.to_string()) }
            p { a href="/admin" { "Back" } }
        },
    );
    let mut resp = (status, body).into_response();
    e.add_retry_after(&mut resp);
    resp
}

pub(crate) fn redirect(to: &str) -> Response {
    (StatusCode::SEE_OTHER, [(LOCATION, to.to_owned())]).into_response()
}

fn sign_in_page(message: Option<&str>) -> Markup {
    layout(
        "Sign in: cmcp-discovery admin",
        html! {
            h1 { "cmcp-discovery admin" }
            @if let Some(m) = message { p.msg { (m) } }
            form method="post" action="/admin/sign-in" {
                label { "Admin key " input type="password" name="key" autocomplete="off" required; }
                " "
                button type="submit" id="sign-in" { "Sign in" }
            }
        },
    )
}

#[derive(Debug, Deserialize)]
pub struct ScreenQuery {
    pub view: Option<String>,
    pub page: Option<i64>,
    pub msg: Option<String>,
}

fn band(confidence: i64) -> &'static str {
    match confidence {
        85.. => "high",
        70..=84 => "medium",
        _ => "low",
    }
}

fn target_words(p: &ProposalRow) -> String {
    match (&p.place_id, &p.create_name) {
        (Some(place), _) => format!("→ place {place}"),
        (None, Some(name)) => format!("→ create cMCP project \"{name}\""),
        _ => p.target.to_string(),
    }
}

fn proposal_rows(rows: &[&ProposalRow], group: Option<&str>) -> Markup {
    html! {
        table {
            tr { th { "" } th { "Space" } th { "Proposal" } th { "Confidence" } th { "Evidence" } @if group.is_none() { th { "Decision" } } }
            @for p in rows {
                tr data-proposal=(p.id) {
                    td { input type="checkbox" name="id" value=(p.id) id={"p" (p.id)}; }
                    td { label for={"p" (p.id)} { (p.space_name) } br; small { (p.container.to_string()) } }
                    td { (target_words(p)) @if p.conflict { br; strong.conflict { "conflict: this space has strong evidence for more than one place" } } }
                    td { (p.confidence) }
                    td { ul { @for line in &p.evidence_text { li { (line) } } } }
                    @if group.is_none() { td.state { (p.state) @if let Some(by) = &p.decided_by { " by " (by) } @if let Some(r) = &p.reason { ": " (r) } } }
                    @if let Some(g) = group { input type="hidden" name={"g:" (g)} value=(p.id); }
                }
            }
        }
    }
}

fn pager(view: &str, page: i64, total: u64) -> Markup {
    let pages = (total as i64 + PAGE_SIZE - 1) / PAGE_SIZE;
    html! {
        p.pager {
            "Page " (page + 1) " of " (pages.max(1)) " (" (total) " in all) "
            @if page > 0 { a href={"/admin?view=" (view) "&page=" (page - 1)} { "previous" } " " }
            @if page + 1 < pages { a href={"/admin?view=" (view) "&page=" (page + 1)} { "next" } }
        }
    }
}

async fn screen(
    State(st): State<AdminState>,
    headers: HeaderMap,
    Query(q): Query<ScreenQuery>,
) -> Response {
    match render(&st, &headers, &q).await {
        Ok(r) => r,
        Err(e) => html_error(e),
    }
}

async fn render(
    st: &AdminState,
    headers: &HeaderMap,
    q: &ScreenQuery,
) -> Result<Response, AdminError> {
    let Some(s) = session::current(&st.store, headers).await? else {
        return Ok(sign_in_page(None).into_response());
    };
    let view = if q.view.as_deref() == Some("decided") {
        "decided"
    } else {
        "pending"
    };
    let page = q.page.unwrap_or(0).clamp(0, MAX_PAGE);
    // The same powers as the `/v1` twins: proposals need mappings,
    // connections need connections.
    let mappings = s.row.key.has_power(Power::Mappings);
    let may_connections = s.row.key.has_power(Power::Connections);
    let filter = |state: ProposalState| ProposalFilter {
        state: Some(state),
        limit: PAGE_SIZE,
        offset: page * PAGE_SIZE,
        ..Default::default()
    };
    let pending_total = match mappings {
        true => {
            st.store
                .count_proposals(&filter(ProposalState::Proposed))
                .await?
        }
        false => 0,
    };
    let body = if !mappings {
        html! { h2 { "Proposals" } p { "Proposals need an admin key with the mappings power." } }
    } else if view == "pending" {
        let rows = st
            .store
            .list_proposals(&filter(ProposalState::Proposed))
            .await?;
        let mut groups: BTreeMap<(&str, u8, &str), Vec<&ProposalRow>> = BTreeMap::new();
        for p in &rows {
            let b = band(p.confidence);
            let order = match b {
                "high" => 0,
                "medium" => 1,
                _ => 2,
            };
            groups
                .entry((p.platform.as_str(), order, b))
                .or_default()
                .push(p);
        }
        html! {
            h2 { "Pending proposals (" (pending_total) ")" }
            (pager("pending", page, pending_total))
            form method="post" action="/admin/decide" {
                input type="hidden" name="csrf" value=(s.csrf);
                input type="hidden" name="back" value={"/admin?view=pending&page=" (page)};
                p {
                    label { "Reason " input type="text" name="reason" id="reason" size="50"; }
                    " "
                    button type="submit" name="action" value="approve" id="approve-selected" { "Approve selected" }
                    " "
                    button type="submit" name="action" value="reject" id="reject-selected" { "Reject selected" }
                }
                @if rows.is_empty() { p { "Nothing waits for a decision." } }
                @for ((platform, _, b), list) in &groups {
                    @let g = format!("{platform}:{b}");
                    h3 { (platform) ", " (b) " confidence (" (list.len()) " on this page)" }
                    p {
                        button type="submit" name="action" value={"approve-all:" (g)} { "Approve all in this group" }
                        " "
                        button type="submit" name="action" value={"reject-all:" (g)} { "Reject all in this group" }
                    }
                    (proposal_rows(list, Some(&g)))
                }
            }
        }
    } else {
        let mut f = filter(ProposalState::Approved);
        let approved = st.store.list_proposals(&f).await?;
        let approved_total = st.store.count_proposals(&f).await?;
        f.state = Some(ProposalState::Rejected);
        let rejected = st.store.list_proposals(&f).await?;
        let rejected_total = st.store.count_proposals(&f).await?;
        let decided: Vec<&ProposalRow> = approved.iter().chain(&rejected).collect();
        html! {
            h2 { "Decided proposals (" (approved_total) " approved, " (rejected_total) " rejected)" }
            (pager("decided", page, approved_total.max(rejected_total)))
            form method="post" action="/admin/decide" {
                input type="hidden" name="csrf" value=(s.csrf);
                input type="hidden" name="back" value={"/admin?view=decided&page=" (page)};
                p {
                    label { "Reason " input type="text" name="reason" size="50"; }
                    " "
                    button type="submit" name="action" value="undo" id="undo-selected" { "Undo selected" }
                }
                (proposal_rows(&decided, None))
            }
        }
    };
    let connections = match may_connections {
        true => connections_overview(st).await?,
        false => Vec::new(),
    };
    let failed_deliveries = match may_connections {
        true => st
            .store
            .delivery_counts()
            .await?
            .into_iter()
            .find(|(status, _)| *status == cmcp_registry::DeliveryStatus::Failed)
            .map_or(0, |(_, n)| n),
        false => 0,
    };
    let drift = match may_connections {
        true => st.store.drift_report(None).await?,
        false => Vec::new(),
    };
    let page = layout(
        "cmcp-discovery admin",
        html! {
            h1 { "cmcp-discovery admin" }
            form method="post" action="/admin/sign-out" {
                "Signed in as " (actor_of(&s.row.key)) " "
                input type="hidden" name="csrf" value=(s.csrf);
                button type="submit" { "Sign out" }
            }
            @if let Some(m) = &q.msg { p.msg { (m) } }
            nav { a href="/admin?view=pending" { "Pending" } " | " a href="/admin?view=decided" { "Decided" } }
            (body)
            h2 { "Connections" }
            @if !may_connections { p { "Connections need an admin key with the connections power." } }
            @if failed_deliveries > 0 {
                p.conflict { (failed_deliveries) " failed webhook deliveries: see "
                    code { "cmcp-discovery deliveries list --state failed" } " or /v1/deliveries?state=failed, and replay them once the cause is fixed." }
            }
            @if may_connections { table {
                tr { th { "Connection" } th { "Status" } th { "Risks" } th { "Last run" } th { "Rate budget" } th { "Change" } }
                @for c in &connections {
                    @let id = c.connection.id.as_str();
                    @let status = c.connection.status.as_str();
                    tr {
                        td { (id) br; small { (c.connection.platform) " " (c.connection.scope) } }
                        td { (status) }
                        td { ul { @for r in &c.connection.risks { li { (r.message) } } } }
                        td { @if let Some(run) = &c.last_run {
                            (run.outcome) ", "
                            (run.figures.items_seen) " items, "
                            (run.figures.rate_limit_waits) " rate-limit waits, "
                            (crate::when(run.started_at))
                        } @else { "never" } }
                        td { (budget_words(c.rate_budget.as_ref(), c.connection.platform.as_str(), chrono::Utc::now().timestamp_millis())) }
                        td {
                            form method="post" action="/admin/connection" {
                                input type="hidden" name="csrf" value=(s.csrf);
                                input type="hidden" name="id" value=(id);
                                input type="hidden" name="status" value=(if status == "enabled" { "disabled" } else { "enabled" });
                                input type="text" name="reason" placeholder="reason";
                                button type="submit" { (if status == "enabled" { "Disable" } else { "Enable" }) }
                            }
                        }
                    }
                }
            } }
            @if may_connections {
                h2 { "Last night's reconciliation" }
                ul {
                    @for l in &drift {
                        li.(if l.flagged { "conflict" } else { "" }) {
                            (l.connection_id) ": " (l.summary)
                            @if let Some(h) = &l.hint { br; small { (h) } }
                        }
                    }
                }
            }
        },
    );
    Ok(page.into_response())
}

/// A connection's rate budget in words: `4211/5000 left, resets at …`, or
/// what is known of it at `now_ms`. Jira and Drive send no budget headers:
/// their budget row holds no figures, yet requests were sent, so it says
/// that and when the last one went, never "no request sent".
fn budget_words(b: Option<&BudgetView>, platform: &str, now_ms: i64) -> String {
    let Some(b) = b else {
        return "not known yet (no request sent)".to_owned();
    };
    let paused = b
        .paused_until
        .filter(|t| *t > now_ms)
        .map(|t| format!(", paused until {}", crate::when(t)))
        .unwrap_or_default();
    if b.remaining.is_none() && b.request_limit.is_none() && b.reset_at.is_none() {
        return format!(
            "{platform} sends no budget figures (it paces requests with Retry-After); last request {}{paused}",
            crate::when(b.updated_at)
        );
    }
    let remaining = b
        .remaining
        .map_or_else(|| "unknown".to_owned(), |n| n.to_string());
    let limit = b.request_limit.map(|l| format!("/{l}")).unwrap_or_default();
    let reset = b
        .reset_at
        .map(|t| format!(", resets at {}", crate::when(t)))
        .unwrap_or_default();
    format!("{remaining}{limit} left{reset}{paused}")
}

/// Repeated `name=value` pairs of a form body.
pub(crate) fn form_pairs(body: &str) -> Vec<(String, String)> {
    url::form_urlencoded::parse(body.as_bytes())
        .into_owned()
        .collect()
}

pub(crate) fn field<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// The way into this page.
static DOOR: Door = Door {
    realm: session::ADMIN,
    admits: |_| true,
    refused: "That is not a live admin key.",
    page: sign_in_page,
    error: html_error,
};

fn back_to(pairs: &[(String, String)], msg: &str) -> String {
    let back = field(pairs, "back")
        // Only a path of this screen, and only what a header can carry
        // (a control character would make the redirect itself invalid).
        .filter(|b| {
            b.starts_with("/admin?") && !b.contains("//") && b.bytes().all(|c| c.is_ascii_graphic())
        })
        .unwrap_or("/admin?view=pending");
    let msg: String = url::form_urlencoded::byte_serialize(msg.as_bytes()).collect();
    format!("{back}&msg={msg}")
}

async fn decide_form(State(st): State<AdminState>, headers: HeaderMap, body: String) -> Response {
    let pairs = form_pairs(&body);
    let run = async {
        let s = DOOR.checked(&st, &headers, &pairs).await?;
        if !s.row.key.has_power(Power::Mappings) {
            return Err(AdminError::Forbidden(
                "deciding needs the mappings power".to_owned(),
            ));
        }
        let action = field(&pairs, "action").unwrap_or("");
        let (verb, ids_from) = match action.split_once('-') {
            Some((verb, rest)) if rest.starts_with("all:") => (verb, format!("g:{}", &rest[4..])),
            _ => (action, "id".to_owned()),
        };
        let decision = match verb {
            "approve" => DecisionBody::Approve,
            "reject" => DecisionBody::Reject,
            "undo" => DecisionBody::Undo,
            _ => return Err(AdminError::BadRequest(format!("unknown action {action:?}"))),
        };
        let ids: Vec<i64> = pairs
            .iter()
            .filter(|(k, _)| *k == ids_from)
            .map(|(_, v)| {
                v.parse()
                    .map_err(|_| AdminError::BadRequest(format!("bad proposal id {v:?}")))
            })
            .collect::<Result<_, _>>()?;
        let body = DecideBody {
            ids,
            decision,
            reason: field(&pairs, "reason").map(str::to_owned),
        };
        let done = decide(&st, &actor_of(&s.row.key), &body).await?;
        Ok(format!("{} proposal(s): {verb} done", done.len()))
    };
    match run.await {
        Ok(msg) => redirect(&back_to(&pairs, &msg)),
        Err(e) => html_error(e),
    }
}

async fn connection_form(
    State(st): State<AdminState>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let pairs = form_pairs(&body);
    let run = async {
        let s = DOOR.checked(&st, &headers, &pairs).await?;
        if !s.row.key.has_power(Power::Connections) {
            return Err(AdminError::Forbidden(
                "this needs the connections power".to_owned(),
            ));
        }
        let id = field(&pairs, "id").unwrap_or("");
        let status: ConnectionStatus = field(&pairs, "status").unwrap_or("").parse()?;
        let reason = field(&pairs, "reason")
            .map(str::trim)
            .filter(|r| !r.is_empty());
        st.store
            .set_connection_status(id, status, &actor_of(&s.row.key), reason)
            .await?;
        Ok(format!("connection {id}: {status}"))
    };
    match run.await {
        Ok(msg) => redirect(&back_to(&pairs, &msg)),
        Err(e) => html_error(e),
    }
}
