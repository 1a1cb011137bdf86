//! What the connection routes answer, typed: connections with their last
//! run and rate budget, status changes, the drift report, webhook
//! deliveries. Each serialises to the same JSON the store's row did.

use std::collections::BTreeMap;

use cmcp_domain::{Owner, RiskNotice, RunFigures};
use cmcp_registry::{BudgetRow, ConnectionRow, DeliveryRow, DriftLine, SyncRunRow};
use serde::Serialize;
use utoipa::ToSchema;

/// Who a connection belongs to: `{"type": "company"}` or
/// `{"type": "person", "id": "…"}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct OwnerView {
    /// company or person.
    #[serde(rename = "type")]
    pub side: String,
    /// The person, for a person's connection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

impl From<Owner> for OwnerView {
    fn from(o: Owner) -> Self {
        match o {
            Owner::Company => OwnerView {
                side: "company".to_owned(),
                id: None,
            },
            Owner::Person(p) => OwnerView {
                side: "person".to_owned(),
                id: Some(p),
            },
        }
    }
}

/// A risk noticed on a credential, shown, never refused.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RiskView {
    pub code: String,
    pub message: String,
}

impl From<RiskNotice> for RiskView {
    fn from(r: RiskNotice) -> Self {
        RiskView {
            code: r.code.as_str().to_owned(),
            message: r.message,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ConnectionView {
    pub id: String,
    pub platform: String,
    /// The org, workspace, site or drive read.
    pub scope: String,
    pub base_url: String,
    pub owner: OwnerView,
    pub status: String,
    pub risks: Vec<RiskView>,
    /// Platform settings (never a secret).
    pub settings: serde_json::Value,
    pub lease_owner: Option<String>,
    pub lease_until: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl From<ConnectionRow> for ConnectionView {
    fn from(c: ConnectionRow) -> Self {
        ConnectionView {
            id: c.id,
            platform: c.platform.as_str().to_owned(),
            scope: c.scope,
            base_url: c.base_url,
            owner: c.owner.into(),
            status: c.status.as_str().to_owned(),
            risks: c.risks.into_iter().map(Into::into).collect(),
            settings: c.settings,
            lease_owner: c.lease_owner,
            lease_until: c.lease_until,
            created_at: c.created_at,
            updated_at: c.updated_at,
        }
    }
}

/// The figures of one sync run.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunFiguresView {
    pub pages: u64,
    pub requests: u64,
    pub not_modified: u64,
    pub retries: u64,
    pub rate_limit_waits: u64,
    pub items_seen: u64,
    pub created: u64,
    pub updated: u64,
    pub renamed: u64,
    pub unchanged: u64,
    pub missing: u64,
    pub skipped_foreign: u64,
    pub duration_ms: u64,
}

impl From<RunFigures> for RunFiguresView {
    fn from(f: RunFigures) -> Self {
        RunFiguresView {
            pages: f.pages,
            requests: f.requests,
            not_modified: f.not_modified,
            retries: f.retries,
            rate_limit_waits: f.rate_limit_waits,
            items_seen: f.items_seen,
            created: f.created,
            updated: f.updated,
            renamed: f.renamed,
            unchanged: f.unchanged,
            missing: f.missing,
            skipped_foreign: f.skipped_foreign,
            duration_ms: f.duration_ms,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RunView {
    pub id: String,
    pub connection_id: String,
    pub triggered_by: String,
    pub worker: Option<String>,
    /// running, complete, partial, failed, deferred or abandoned.
    pub outcome: String,
    pub started_at: i64,
    pub finished_at: Option<i64>,
    pub figures: RunFiguresView,
    pub error: Option<String>,
}

impl From<SyncRunRow> for RunView {
    fn from(r: SyncRunRow) -> Self {
        RunView {
            id: r.id,
            connection_id: r.connection_id,
            triggered_by: r.triggered_by.as_str().to_owned(),
            worker: r.worker,
            outcome: r.outcome.as_str().to_owned(),
            started_at: r.started_at,
            finished_at: r.finished_at,
            figures: r.figures.into(),
            error: r.error,
        }
    }
}

/// The shared rate budget of a connection's credential as the fleet last
/// learned it; times in epoch milliseconds.
#[derive(Debug, Serialize, ToSchema)]
pub struct BudgetView {
    /// A fingerprint of the credential, never the token.
    pub budget_key: String,
    pub remaining: Option<i64>,
    pub request_limit: Option<i64>,
    pub reset_at: Option<i64>,
    pub window_floor: Option<i64>,
    pub paused_until: Option<i64>,
    pub in_flight: i64,
    pub updated_at: i64,
}

impl From<BudgetRow> for BudgetView {
    fn from(b: BudgetRow) -> Self {
        BudgetView {
            budget_key: b.budget_key,
            remaining: b.remaining,
            request_limit: b.request_limit,
            reset_at: b.reset_at,
            window_floor: b.window_floor,
            paused_until: b.paused_until,
            in_flight: b.in_flight,
            updated_at: b.updated_at,
        }
    }
}

/// One connection with its last run and rate budget (null before the
/// first run or the first request).
#[derive(Debug, Serialize, ToSchema)]
pub struct ConnectionOverview {
    pub connection: ConnectionView,
    pub last_run: Option<RunView>,
    pub rate_budget: Option<BudgetView>,
}

/// `GET /v1/connections`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConnectionList {
    pub items: Vec<ConnectionOverview>,
}

/// `POST /v1/connections/{id}/status`.
#[derive(Debug, Serialize, ToSchema)]
pub struct StatusResponse {
    pub id: String,
    pub status: String,
    /// False when the connection already had that status.
    pub changed: bool,
}

/// One connection's line of the drift report.
#[derive(Debug, Serialize, ToSchema)]
pub struct DriftView {
    pub connection_id: String,
    /// The latest finished reconcile, if any ran.
    pub run_id: Option<String>,
    pub finished_at: Option<i64>,
    /// Changes that reconcile found no webhook had delivered.
    pub missed: u64,
    /// Missed changes by kind (created, renamed, key-changed, archived,
    /// unarchived, trashed, missing, reappeared).
    pub by_kind: BTreeMap<String, u64>,
    pub nights_in_a_row: usize,
    /// Webhooks miss changes night after night.
    pub flagged: bool,
    pub hint: Option<String>,
    pub summary: String,
}

impl From<DriftLine> for DriftView {
    fn from(d: DriftLine) -> Self {
        DriftView {
            connection_id: d.connection_id,
            run_id: d.run_id,
            finished_at: d.finished_at,
            missed: d.missed,
            by_kind: d
                .by_kind
                .into_iter()
                .map(|(k, n)| (k.as_str().to_owned(), n))
                .collect(),
            nights_in_a_row: d.nights_in_a_row,
            flagged: d.flagged,
            hint: d.hint,
            summary: d.summary,
        }
    }
}

/// `GET /v1/drift`.
#[derive(Debug, Serialize, ToSchema)]
pub struct DriftList {
    pub items: Vec<DriftView>,
}

/// A webhook delivery: its headers, never its body.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryView {
    pub id: String,
    pub connection_id: String,
    pub platform: String,
    /// The platform's delivery id.
    pub delivery_key: String,
    pub event: String,
    pub received_at: i64,
    /// `[name, value]` pairs as received.
    pub headers: Vec<Vec<String>>,
    pub verification: String,
    /// received, processed, failed or ignored.
    pub status: String,
    pub error: Option<String>,
    pub processed_at: Option<i64>,
    /// Processing attempts that failed and were retried.
    pub attempts: i64,
    /// When the next retry is due, while one is.
    pub next_attempt_at: Option<i64>,
}

impl From<DeliveryRow> for DeliveryView {
    fn from(d: DeliveryRow) -> Self {
        DeliveryView {
            id: d.id,
            connection_id: d.connection_id,
            platform: d.platform.as_str().to_owned(),
            delivery_key: d.delivery_key,
            event: d.event,
            received_at: d.received_at,
            headers: d.headers.into_iter().map(|(k, v)| vec![k, v]).collect(),
            verification: d.verification,
            status: d.status.as_str().to_owned(),
            error: d.error,
            processed_at: d.processed_at,
            attempts: d.attempts,
            next_attempt_at: d.next_attempt_at,
        }
    }
}

/// `GET /v1/deliveries`.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryList {
    pub items: Vec<DeliveryView>,
}

/// `POST /v1/deliveries/{id}/replay`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReplayResponse {
    pub id: String,
    /// Always received: the delivery waits for a worker again.
    pub status: String,
    /// The queued job.
    pub job_id: String,
}
