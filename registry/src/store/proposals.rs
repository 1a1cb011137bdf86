//! Mapping proposals and the mappings an ADMIN approved. Matching (in
//! `cmcp-matching`) computes candidates; this module keeps their life:
//! proposed → approved | rejected | superseded. A candidate is stored once
//! per (container, target, evidence hash), so re-running with the same
//! evidence proposes nothing new and a rejected proposal stays rejected until
//! its evidence changes. Every decision writes its audit entry in the same
//! transaction; a bulk decision is one transaction, all or nothing.

use std::collections::{HashMap, HashSet};

use cmcp_domain::{AliasKind, Platform, SpaceAddress};
use serde::Serialize;

use super::audit::{NewAuditEntry, insert_audit};
use super::{Store, in_tx, now_ms, on_pool};
use crate::error::{RegistryError, Result};

cmcp_domain::string_enum! {
    /// A proposal's life: proposed → approved | rejected | superseded.
    pub enum ProposalState: "proposal state" {
        Proposed = "proposed",
        Approved = "approved",
        Rejected = "rejected",
        /// Its evidence changed or vanished, or another proposal of the
        /// container was approved.
        Superseded = "superseded",
    }
}

/// What a proposal asks for: map to an existing place, or have cMCP create
/// one (the decision is recorded for cMCP to act on). Stored and sent as
/// `place:<id>` or `create:<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ProposalTarget {
    Place(String),
    Create(String),
}

impl ProposalTarget {
    pub fn as_db(&self) -> String {
        self.to_string()
    }

    /// Reads the stored form back.
    pub fn from_db(s: &str) -> Option<ProposalTarget> {
        if let Some(id) = s.strip_prefix("place:") {
            Some(ProposalTarget::Place(id.to_owned()))
        } else {
            s.strip_prefix("create:")
                .map(|name| ProposalTarget::Create(name.to_owned()))
        }
    }
}

impl std::fmt::Display for ProposalTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProposalTarget::Place(id) => write!(f, "place:{id}"),
            ProposalTarget::Create(name) => write!(f, "create:{name}"),
        }
    }
}

impl Serialize for ProposalTarget {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct NewProposal {
    pub container: SpaceAddress,
    pub space_name: String,
    pub target: ProposalTarget,
    /// Typed evidence, serialised by the matcher.
    pub evidence: serde_json::Value,
    /// The evidence in words, one line each.
    pub evidence_text: Vec<String>,
    pub confidence: i64,
    pub conflict: bool,
    pub evidence_hash: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProposalRow {
    pub id: i64,
    pub container: SpaceAddress,
    pub platform: Platform,
    pub space_name: String,
    pub target: ProposalTarget,
    pub place_id: Option<String>,
    pub create_name: Option<String>,
    pub evidence: serde_json::Value,
    pub evidence_text: Vec<String>,
    pub confidence: i64,
    pub conflict: bool,
    pub state: ProposalState,
    pub evidence_hash: String,
    pub created_at: i64,
    pub decided_by: Option<String>,
    pub decided_at: Option<i64>,
    pub reason: Option<String>,
}

#[derive(sqlx::FromRow)]
struct RawProposal {
    id: i64,
    container: String,
    platform: String,
    space_name: String,
    target: String,
    place_id: Option<String>,
    create_name: Option<String>,
    evidence_json: String,
    evidence_text: String,
    confidence: i64,
    conflict: bool,
    state: String,
    evidence_hash: String,
    created_at: i64,
    decided_by: Option<String>,
    decided_at: Option<i64>,
    reason: Option<String>,
}

impl TryFrom<RawProposal> for ProposalRow {
    type Error = RegistryError;
    fn try_from(r: RawProposal) -> Result<Self> {
        let corrupt = |what: &str| RegistryError::Corrupt {
            what: format!("proposal {}: {what}", r.id),
        };
        Ok(ProposalRow {
            container: r.container.parse().map_err(|_| corrupt("container"))?,
            evidence: serde_json::from_str(&r.evidence_json).map_err(|_| corrupt("evidence"))?,
            evidence_text: r.evidence_text.split('\n').map(str::to_owned).collect(),
            platform: r.platform.parse().map_err(|_| corrupt("platform"))?,
            target: ProposalTarget::from_db(&r.target).ok_or_else(|| corrupt("target"))?,
            state: r.state.parse().map_err(|_| corrupt("state"))?,
            id: r.id,
            space_name: r.space_name,
            place_id: r.place_id,
            create_name: r.create_name,
            confidence: r.confidence,
            conflict: r.conflict,
            evidence_hash: r.evidence_hash,
            created_at: r.created_at,
            decided_by: r.decided_by,
            decided_at: r.decided_at,
            reason: r.reason,
        })
    }
}

const COLUMNS: &str = "id, container, platform, space_name, target, place_id, create_name, evidence_json, \
     evidence_text, confidence, conflict, state, evidence_hash, created_at, decided_by, decided_at, reason";

#[derive(Debug, Clone, Default)]
pub struct ProposalFilter {
    pub state: Option<ProposalState>,
    pub platform: Option<Platform>,
    pub min_confidence: Option<i64>,
    pub max_confidence: Option<i64>,
    /// Case-insensitive substring of the space name, target or evidence.
    pub text: Option<String>,
    pub limit: i64,
    pub offset: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Approve,
    Reject,
    /// Back to proposed; an approval's mapping is removed.
    Undo,
}

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct MappingRow {
    pub space_address: String,
    pub place_id: String,
    pub approved_by: String,
    pub proposal_id: Option<i64>,
    pub created_at: i64,
}

/// What storing a round of candidates changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ProposalFigures {
    pub proposed: u64,
    pub superseded: u64,
    pub unchanged: u64,
}

/// A space as matching sees it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct MatchSpaceRow {
    pub address: String,
    pub kind: String,
    pub display_name: String,
    pub container: Option<String>,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct MatchAliasRow {
    pub space_address: String,
    pub kind: String,
    pub value: String,
}

impl MatchAliasRow {
    pub fn alias_kind(&self) -> Option<AliasKind> {
        self.kind.parse().ok()
    }
}

#[derive(sqlx::FromRow)]
struct Existing {
    id: i64,
    container: String,
    target: String,
    evidence_hash: String,
    #[sqlx(try_from = "String")]
    state: ProposalState,
    confidence: i64,
    conflict: bool,
}

impl Store {
    /// Store one round of candidates: new evidence becomes a proposal, an
    /// open proposal whose evidence changed or vanished is superseded, a
    /// decided one with unchanged evidence is left alone.
    pub async fn sync_proposals(&self, candidates: &[NewProposal]) -> Result<ProposalFigures> {
        self.sync_proposals_in(None, candidates).await
    }

    /// [`Store::sync_proposals`] for the `containers` only (the incremental
    /// ladder's round): proposals of other containers are not read or
    /// touched. Every candidate must be of one of the containers.
    pub async fn sync_proposals_of(
        &self,
        containers: &[String],
        candidates: &[NewProposal],
    ) -> Result<ProposalFigures> {
        self.sync_proposals_in(Some(containers), candidates).await
    }

    async fn sync_proposals_in(
        &self,
        scope: Option<&[String]>,
        candidates: &[NewProposal],
    ) -> Result<ProposalFigures> {
        let now = now_ms();
        let mut figures = ProposalFigures::default();
        const SELECT: &str = "SELECT id, container, target, evidence_hash, state, confidence, conflict FROM proposals";
        in_tx!(self, tx => {
            let mut rows: Vec<Existing> = Vec::new();
            match scope {
                None => rows = sqlx::query_as(SELECT).fetch_all(&mut *tx).await?,
                Some(containers) => {
                    for chunk in containers.chunks(500) {
                        let list = (1..=chunk.len()).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ");
                        let sql = format!("{SELECT} WHERE container IN ({list})");
                        let mut q = sqlx::query_as(sqlx::AssertSqlSafe(sql));
                        for c in chunk {
                            q = q.bind(c);
                        }
                        rows.extend(q.fetch_all(&mut *tx).await?);
                    }
                }
            }
            let mut by_key: HashMap<(String, String, String), Existing> = HashMap::new();
            for r in rows {
                by_key.insert((r.container.clone(), r.target.clone(), r.evidence_hash.clone()), r);
            }
            let mut wanted = HashSet::new();
            for c in candidates {
                let key = (c.container.to_string(), c.target.as_db(), c.evidence_hash.clone());
                wanted.insert(key.clone());
                match by_key.get(&key) {
                    Some(e) if e.state == ProposalState::Superseded
                        || (e.state == ProposalState::Proposed && (e.confidence != c.confidence || e.conflict != c.conflict)) =>
                    {
                        if e.state == ProposalState::Superseded {
                            figures.proposed += 1;
                        } else {
                            figures.unchanged += 1;
                        }
                        sqlx::query("UPDATE proposals SET state = 'proposed', confidence = $1, conflict = $2 WHERE id = $3")
                            .bind(c.confidence).bind(c.conflict).bind(e.id)
                            .execute(&mut *tx).await?;
                    }
                    Some(_) => figures.unchanged += 1,
                    None => {
                        let (place_id, create_name) = match &c.target {
                            ProposalTarget::Place(id) => (Some(id.as_str()), None),
                            ProposalTarget::Create(name) => (None, Some(name.as_str())),
                        };
                        // Another round (a second worker's sync) may have
                        // stored the same evidence since this one read:
                        // the unique key then waits for it, and its row
                        // stands instead of failing this whole round.
                        let stored = sqlx::query(
                            "INSERT INTO proposals (container, platform, space_name, target, place_id, create_name, \
                             evidence_json, evidence_text, confidence, conflict, state, evidence_hash, created_at) \
                             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'proposed', $11, $12) \
                             ON CONFLICT (container, target, evidence_hash) DO NOTHING",
                        )
                        .bind(c.container.to_string())
                        .bind(c.container.platform().as_str())
                        .bind(&c.space_name)
                        .bind(c.target.as_db())
                        .bind(place_id)
                        .bind(create_name)
                        .bind(c.evidence.to_string())
                        .bind(c.evidence_text.join("\n"))
                        .bind(c.confidence)
                        .bind(c.conflict)
                        .bind(&c.evidence_hash)
                        .bind(now)
                        .execute(&mut *tx).await?
                        .rows_affected();
                        if stored == 1 {
                            figures.proposed += 1;
                        } else {
                            figures.unchanged += 1;
                        }
                    }
                }
            }
            for (key, e) in &by_key {
                if e.state == ProposalState::Proposed && !wanted.contains(key) {
                    sqlx::query("UPDATE proposals SET state = 'superseded' WHERE id = $1")
                        .bind(e.id).execute(&mut *tx).await?;
                    figures.superseded += 1;
                }
            }
        });
        Ok(figures)
    }

    pub async fn list_proposals(&self, f: &ProposalFilter) -> Result<Vec<ProposalRow>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM proposals WHERE {FILTER} ORDER BY platform, confidence DESC, id LIMIT $6 OFFSET $7"
        );
        let limit = if f.limit <= 0 { i64::MAX } else { f.limit };
        let pattern = f.text.as_ref().map(|t| format!("%{}%", t.to_lowercase()));
        let raws: Vec<RawProposal> = on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(f.state.map(ProposalState::as_str)).bind(f.platform.map(Platform::as_str))
                .bind(f.min_confidence).bind(f.max_confidence).bind(pattern.as_deref())
                .bind(limit).bind(f.offset.max(0))
                .fetch_all(pool).await?
        });
        raws.into_iter().map(TryInto::try_into).collect()
    }

    pub async fn count_proposals(&self, f: &ProposalFilter) -> Result<u64> {
        let sql = format!("SELECT COUNT(*) FROM proposals WHERE {FILTER}");
        let pattern = f.text.as_ref().map(|t| format!("%{}%", t.to_lowercase()));
        let (n,): (i64,) = on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(f.state.map(ProposalState::as_str)).bind(f.platform.map(Platform::as_str))
                .bind(f.min_confidence).bind(f.max_confidence).bind(pattern.as_deref())
                .fetch_one(pool).await?
        });
        Ok(u64::try_from(n).unwrap_or(0))
    }

    pub async fn get_proposal(&self, id: i64) -> Result<ProposalRow> {
        let sql = format!("SELECT {COLUMNS} FROM proposals WHERE id = $1");
        let raw: Option<RawProposal> = on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(id).fetch_optional(pool).await?
        });
        raw.ok_or_else(|| RegistryError::not_found(format!("proposal {id}")))?
            .try_into()
    }

    /// Decide proposals in one transaction: each approval writes its mapping,
    /// each decision its audit entry; one invalid item leaves nothing.
    pub async fn decide_proposals(
        &self,
        ids: &[i64],
        decision: Decision,
        actor: &str,
        reason: Option<&str>,
    ) -> Result<Vec<ProposalRow>> {
        let mut unique = HashSet::new();
        if let Some(dup) = ids.iter().find(|id| !unique.insert(**id)) {
            return Err(RegistryError::Invalid {
                what: format!("proposal {dup} listed twice"),
            });
        }
        let now = now_ms();
        let select = format!("SELECT {COLUMNS} FROM proposals WHERE id = $1");
        let mut decided = Vec::with_capacity(ids.len());
        in_tx!(self, durable, tx => {
            for &id in ids {
                let raw: Option<RawProposal> = sqlx::query_as(sqlx::AssertSqlSafe(select.clone()))
                    .bind(id).fetch_optional(&mut *tx).await?;
                let before: ProposalRow = raw
                    .ok_or_else(|| RegistryError::not_found(format!("proposal {id}")))?
                    .try_into()?;
                let container = before.container.to_string();
                let new_state = match (decision, before.state) {
                    (Decision::Approve, ProposalState::Proposed) => ProposalState::Approved,
                    (Decision::Reject, ProposalState::Proposed) => ProposalState::Rejected,
                    (Decision::Undo, ProposalState::Approved | ProposalState::Rejected) => ProposalState::Proposed,
                    (_, state) => {
                        return Err(RegistryError::Invalid {
                            what: format!("decision {decision:?} on proposal {id} which is {state}"),
                        });
                    }
                };
                if decision == Decision::Approve {
                    if let Some(place) = &before.place_id {
                        let status: Option<(String,)> = sqlx::query_as("SELECT status FROM places WHERE id = $1")
                            .bind(place).fetch_optional(&mut *tx).await?;
                        if status.as_ref().map(|s| s.0.as_str()) != Some("active") {
                            return Err(RegistryError::Invalid {
                                what: format!("proposal {id}: place {place} is not active"),
                            });
                        }
                        let mapped: Option<(String,)> = sqlx::query_as("SELECT place_id FROM mappings WHERE space_address = $1")
                            .bind(&container).fetch_optional(&mut *tx).await?;
                        if let Some((other,)) = mapped {
                            return Err(RegistryError::Invalid {
                                what: format!("proposal {id}: {container} is already mapped to place {other} (conflict)"),
                            });
                        }
                        sqlx::query(
                            "INSERT INTO mappings (space_address, place_id, approved_by, proposal_id, created_at) \
                             VALUES ($1, $2, $3, $4, $5)",
                        )
                        .bind(&container).bind(place).bind(actor).bind(id).bind(now)
                        .execute(&mut *tx).await?;
                    }
                    sqlx::query("UPDATE proposals SET state = 'superseded' WHERE container = $1 AND state = 'proposed' AND id <> $2")
                        .bind(&container).bind(id).execute(&mut *tx).await?;
                }
                if decision == Decision::Undo && before.state == ProposalState::Approved {
                    sqlx::query("DELETE FROM mappings WHERE proposal_id = $1").bind(id).execute(&mut *tx).await?;
                }
                let (by, at, why) = if new_state == ProposalState::Proposed {
                    (None, None, None)
                } else {
                    (Some(actor), Some(now), reason)
                };
                sqlx::query("UPDATE proposals SET state = $1, decided_by = $2, decided_at = $3, reason = $4 WHERE id = $5")
                    .bind(new_state.as_str()).bind(by).bind(at).bind(why).bind(id)
                    .execute(&mut *tx).await?;
                let entry = NewAuditEntry {
                    actor: actor.to_owned(),
                    action: format!("proposal.{}", match decision {
                        Decision::Approve => "approve",
                        Decision::Reject => "reject",
                        Decision::Undo => "undo",
                    }),
                    target: container.clone(),
                    reason: reason.map(str::to_owned),
                    before: Some(serde_json::json!({"proposal": id, "state": before.state, "target": before.target})),
                    after: Some(serde_json::json!({"proposal": id, "state": new_state, "target": before.target})),
                };
                insert_audit!(&mut *tx, &entry, now)?;
                let mut after = before;
                after.state = new_state;
                decided.push(after);
            }
        });
        Ok(decided)
    }

    pub async fn list_mappings(&self) -> Result<Vec<MappingRow>> {
        Ok(on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT space_address, place_id, approved_by, proposal_id, created_at FROM mappings ORDER BY space_address",
            )
            .fetch_all(pool)
            .await?
        }))
    }
}

/// Shared WHERE clause of the proposal listing; binds $1..$5.
const FILTER: &str = "($1 IS NULL OR state = $1) AND ($2 IS NULL OR platform = $2) \
     AND ($3 IS NULL OR confidence >= $3) AND ($4 IS NULL OR confidence <= $4) \
     AND ($5 IS NULL OR LOWER(space_name) LIKE $5 OR LOWER(target) LIKE $5 OR LOWER(evidence_text) LIKE $5)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_keeps_its_stored_text() {
        for (target, text) in [
            (ProposalTarget::Place("p-1".into()), "place:p-1"),
            (ProposalTarget::Create("Payments".into()), "create:Payments"),
        ] {
            assert_eq!(target.as_db(), text);
            assert_eq!(ProposalTarget::from_db(text), Some(target.clone()));
            assert_eq!(
                serde_json::to_string(&target).unwrap(),
                format!("\"{text}\"")
            );
        }
        assert_eq!(ProposalTarget::from_db("elsewhere:x"), None);
    }
}
