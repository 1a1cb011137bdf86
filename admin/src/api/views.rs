//! What the ADMIN's routes answer, as typed schemas for the OpenAPI
//! document: proposals, mappings, places, the audit log. The store's rows
//! stay free of HTTP concerns; these are built from them and serialise to
//! the same JSON the rows did. Connections, runs, drift and deliveries are
//! in [`super::views_conn`].

use cmcp_registry::{AuditEntry, MappingRow, PlaceFigures, ProposalFigures, ProposalRow};
use serde::Serialize;
use utoipa::ToSchema;

/// One mapping proposal with its evidence.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProposalView {
    pub id: i64,
    /// The container space's address.
    pub container: String,
    /// github, bitbucket, jira or drive.
    pub platform: String,
    pub space_name: String,
    /// `place:<id>` or `create:<name>`.
    pub target: String,
    pub place_id: Option<String>,
    pub create_name: Option<String>,
    /// The matcher's typed evidence.
    pub evidence: serde_json::Value,
    /// The evidence in words, one line each.
    pub evidence_text: Vec<String>,
    /// 0 to 100.
    pub confidence: i64,
    /// Another proposal claims the same space.
    pub conflict: bool,
    /// proposed, approved, rejected or superseded.
    pub state: String,
    pub evidence_hash: String,
    /// Epoch milliseconds.
    pub created_at: i64,
    pub decided_by: Option<String>,
    pub decided_at: Option<i64>,
    pub reason: Option<String>,
}

impl From<ProposalRow> for ProposalView {
    fn from(p: ProposalRow) -> Self {
        ProposalView {
            id: p.id,
            container: p.container.to_string(),
            platform: p.platform.as_str().to_owned(),
            space_name: p.space_name,
            target: p.target.to_string(),
            place_id: p.place_id,
            create_name: p.create_name,
            evidence: p.evidence,
            evidence_text: p.evidence_text,
            confidence: p.confidence,
            conflict: p.conflict,
            state: p.state.as_str().to_owned(),
            evidence_hash: p.evidence_hash,
            created_at: p.created_at,
            decided_by: p.decided_by,
            decided_at: p.decided_at,
            reason: p.reason,
        }
    }
}

pub fn proposals(rows: Vec<ProposalRow>) -> Vec<ProposalView> {
    rows.into_iter().map(Into::into).collect()
}

/// `GET /v1/proposals`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProposalList {
    /// Proposals matching the filter, before `limit` and `offset`.
    pub total: u64,
    pub items: Vec<ProposalView>,
}

/// `POST /v1/proposals/decisions`.
#[derive(Debug, Serialize, ToSchema)]
pub struct DecideResponse {
    pub decided: usize,
    pub items: Vec<ProposalView>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MappingView {
    pub space_address: String,
    pub place_id: String,
    pub approved_by: String,
    pub proposal_id: Option<i64>,
    /// Epoch milliseconds.
    pub created_at: i64,
}

impl From<MappingRow> for MappingView {
    fn from(m: MappingRow) -> Self {
        MappingView {
            space_address: m.space_address,
            place_id: m.place_id,
            approved_by: m.approved_by,
            proposal_id: m.proposal_id,
            created_at: m.created_at,
        }
    }
}

/// `GET /v1/mappings`.
#[derive(Debug, Serialize, ToSchema)]
pub struct MappingList {
    pub items: Vec<MappingView>,
}

/// What loading the places changed.
#[derive(Debug, Serialize, ToSchema)]
pub struct PlaceFiguresView {
    pub created: u64,
    pub updated: u64,
    pub unchanged: u64,
    pub retired: u64,
}

/// What refreshing the proposals changed.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProposalFiguresView {
    pub proposed: u64,
    pub superseded: u64,
    pub unchanged: u64,
}

/// What refreshing the people's suggestions after an import did: who
/// belongs where decides a link or a request to join.
#[derive(Debug, Serialize, ToSchema)]
pub struct SuggestionFiguresView {
    /// People whose suggestions were refreshed.
    pub refreshed: u64,
    /// People whose refresh failed (the server's log names them and says
    /// why); theirs are refreshed at their next sync, or by loading the
    /// places again.
    pub failed: u64,
}

/// `PUT /v1/places`.
#[derive(Debug, Serialize, ToSchema)]
pub struct PutPlacesResponse {
    pub places: PlaceFiguresView,
    pub proposals: ProposalFiguresView,
    pub suggestions: SuggestionFiguresView,
}

impl PutPlacesResponse {
    pub fn new(
        p: PlaceFigures,
        q: ProposalFigures,
        s: &cmcp_matching::EveryoneRefreshed,
    ) -> PutPlacesResponse {
        PutPlacesResponse {
            places: PlaceFiguresView {
                created: p.created,
                updated: p.updated,
                unchanged: p.unchanged,
                retired: p.retired,
            },
            proposals: ProposalFiguresView {
                proposed: q.proposed,
                superseded: q.superseded,
                unchanged: q.unchanged,
            },
            suggestions: SuggestionFiguresView {
                refreshed: s.refreshed,
                failed: s.failed.len() as u64,
            },
        }
    }
}

/// One audited decision.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditView {
    pub id: i64,
    /// Epoch milliseconds.
    pub at: i64,
    /// The key (name and id) or command that acted.
    pub actor: String,
    pub action: String,
    pub target: String,
    pub reason: Option<String>,
    /// What the target was before, when it had a state.
    pub before: Option<serde_json::Value>,
    pub after: Option<serde_json::Value>,
}

impl From<AuditEntry> for AuditView {
    fn from(a: AuditEntry) -> Self {
        AuditView {
            id: a.id,
            at: a.at,
            actor: a.actor,
            action: a.action,
            target: a.target,
            reason: a.reason,
            before: a.before,
            after: a.after,
        }
    }
}

/// `GET /v1/audit`.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditList {
    pub items: Vec<AuditView>,
}
