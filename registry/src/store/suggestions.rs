//! A person's suggestions: where one of their private spaces matches a
//! company space with an approved mapping, the person (and only they) is
//! offered the mapped place: a link when they are a member of it, a request
//! to join otherwise. When nothing matches, the person may ask an ADMIN to
//! create a cMCP project for the space.
//!
//! Why a table of their own and not proposals: proposals are the company's
//! (an ADMIN decides, a mapping follows); a suggestion is one person's
//! business and never becomes a company mapping (DESIGN rule 6). A
//! declined suggestion stays declined while its evidence hash is the same;
//! an accepted link files the space under the place in that person's
//! manifest (and writes a feed row only they can read); an accepted
//! request is one the ADMINs list.

use std::collections::HashMap;

use cmcp_domain::{Owner, SpaceAddress, SpaceStatus};
use serde::Serialize;

use super::audit::{NewAuditEntry, insert_audit};
use super::{Store, in_tx, now_ms, on_pool};
use crate::error::{RegistryError, Result};

cmcp_domain::string_enum! {
    /// What a suggestion offers.
    pub enum SuggestionKind: "suggestion kind" {
        /// File the space under a place the person belongs to.
        Link = "link",
        /// Ask to join the place the space matches.
        RequestToJoin = "request-to-join",
        /// Ask an ADMIN to create a cMCP project for the space.
        RequestToCreate = "request-to-create",
    }
}

cmcp_domain::string_enum! {
    pub enum SuggestionState: "suggestion state" {
        Open = "open",
        Accepted = "accepted",
        Declined = "declined",
    }
}

/// The person's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuggestionAnswer {
    Accept,
    Decline,
}

/// One suggestion of a matching round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSuggestion {
    pub space_address: SpaceAddress,
    pub place_id: String,
    pub kind: SuggestionKind,
    pub evidence: serde_json::Value,
    pub evidence_text: Vec<String>,
    pub confidence: i64,
    pub evidence_hash: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SuggestionRow {
    pub id: i64,
    pub person: String,
    pub space_address: SpaceAddress,
    /// The space's display name, when it still exists.
    pub space_name: Option<String>,
    pub kind: SuggestionKind,
    pub place_id: Option<String>,
    pub place_name: Option<String>,
    /// For a request to create: the name asked for.
    pub create_name: Option<String>,
    pub evidence: serde_json::Value,
    pub evidence_text: Vec<String>,
    pub confidence: i64,
    pub state: SuggestionState,
    pub created_at: i64,
    pub updated_at: i64,
    pub decided_by: Option<String>,
    pub decided_at: Option<i64>,
}

/// What a matching round changed for one person.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SuggestionFigures {
    pub opened: u64,
    /// Declined ones whose evidence changed: open again.
    pub reopened: u64,
    pub updated: u64,
    pub unchanged: u64,
    /// Open ones no longer matched: gone.
    pub withdrawn: u64,
}

#[derive(sqlx::FromRow)]
struct RawSuggestion {
    id: i64,
    person: String,
    space_address: String,
    space_name: Option<String>,
    kind: String,
    place_id: Option<String>,
    place_name: Option<String>,
    create_name: Option<String>,
    evidence_json: String,
    evidence_text: String,
    confidence: i64,
    state: String,
    created_at: i64,
    updated_at: i64,
    decided_by: Option<String>,
    decided_at: Option<i64>,
}

impl TryFrom<RawSuggestion> for SuggestionRow {
    type Error = RegistryError;
    fn try_from(r: RawSuggestion) -> Result<Self> {
        let corrupt = |what: &str| RegistryError::Corrupt {
            what: format!("suggestion {}: {what}", r.id),
        };
        Ok(SuggestionRow {
            space_address: r.space_address.parse().map_err(|_| corrupt("space"))?,
            kind: r.kind.parse().map_err(|_| corrupt("kind"))?,
            state: r.state.parse().map_err(|_| corrupt("state"))?,
            evidence: serde_json::from_str(&r.evidence_json).map_err(|_| corrupt("evidence"))?,
            evidence_text: r
                .evidence_text
                .split('\n')
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect(),
            id: r.id,
            person: r.person,
            space_name: r.space_name,
            place_id: r.place_id,
            place_name: r.place_name,
            create_name: r.create_name,
            confidence: r.confidence,
            created_at: r.created_at,
            updated_at: r.updated_at,
            decided_by: r.decided_by,
            decided_at: r.decided_at,
        })
    }
}

const SELECT: &str = "SELECT g.id, g.person, g.space_address, s.display_name AS space_name, g.kind, \
     g.place_id, p.name AS place_name, g.create_name, g.evidence_json, g.evidence_text, g.confidence, \
     g.state, g.created_at, g.updated_at, g.decided_by, g.decided_at \
     FROM suggestions g LEFT JOIN spaces s ON s.address = g.space_address \
     LEFT JOIN places p ON p.id = g.place_id";

const CREATE_TARGET: &str = "create";

fn place_target(place: &str) -> String {
    format!("place:{place}")
}

/// The existing row of a (space, target) pair, as a round compares it.
#[derive(sqlx::FromRow)]
struct Existing {
    id: i64,
    space_address: String,
    target: String,
    state: String,
    evidence_hash: String,
}

impl Store {
    /// Stores `person`'s round of suggestions (see the module docs): new
    /// pairs open, changed evidence updates (and reopens a declined one),
    /// open ones no longer matched go; accepted ones and requests to
    /// create are the person's and stay.
    pub async fn sync_suggestions(
        &self,
        person: &str,
        round: &[NewSuggestion],
    ) -> Result<SuggestionFigures> {
        let now = now_ms();
        let mut f = SuggestionFigures::default();
        in_tx!(self, tx => {
            let existing: Vec<Existing> = sqlx::query_as(
                "SELECT id, space_address, target, state, evidence_hash FROM suggestions WHERE person = $1 AND target <> $2",
            )
            .bind(person).bind(CREATE_TARGET)
            .fetch_all(&mut *tx).await?;
            let mut by_pair: HashMap<(String, String), Existing> = existing
                .into_iter()
                .map(|e| ((e.space_address.clone(), e.target.clone()), e))
                .collect();
            for s in round {
                let target = place_target(&s.place_id);
                let evidence = s.evidence.to_string();
                let text = s.evidence_text.join("\n");
                match by_pair.remove(&(s.space_address.to_string(), target.clone())) {
                    None => {
                        sqlx::query(
                            "INSERT INTO suggestions (person, space_address, target, kind, place_id, evidence_json, \
                             evidence_text, confidence, evidence_hash, state, created_at, updated_at) \
                             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'open', $10, $10)",
                        )
                        .bind(person).bind(s.space_address.to_string()).bind(&target)
                        .bind(s.kind.as_str()).bind(&s.place_id).bind(&evidence).bind(&text)
                        .bind(s.confidence).bind(&s.evidence_hash).bind(now)
                        .execute(&mut *tx).await?;
                        f.opened += 1;
                    }
                    Some(e) if e.evidence_hash == s.evidence_hash => f.unchanged += 1,
                    Some(e) => {
                        let reopen = e.state == SuggestionState::Declined.as_str();
                        let state = if reopen { SuggestionState::Open.as_str() } else { e.state.as_str() };
                        sqlx::query(
                            "UPDATE suggestions SET kind = $1, evidence_json = $2, evidence_text = $3, confidence = $4, \
                             evidence_hash = $5, state = $6, updated_at = $7, \
                             decided_by = CASE WHEN $8 THEN NULL ELSE decided_by END, \
                             decided_at = CASE WHEN $8 THEN NULL ELSE decided_at END WHERE id = $9",
                        )
                        .bind(s.kind.as_str()).bind(&evidence).bind(&text).bind(s.confidence)
                        .bind(&s.evidence_hash).bind(state).bind(now).bind(reopen).bind(e.id)
                        .execute(&mut *tx).await?;
                        if reopen {
                            f.reopened += 1;
                        } else {
                            f.updated += 1;
                        }
                    }
                }
            }
            for e in by_pair.values().filter(|e| e.state == SuggestionState::Open.as_str()) {
                sqlx::query("DELETE FROM suggestions WHERE id = $1")
                    .bind(e.id)
                    .execute(&mut *tx).await?;
                f.withdrawn += 1;
            }
        });
        Ok(f)
    }

    /// `person`'s suggestions, newest first.
    pub async fn list_suggestions(&self, person: &str) -> Result<Vec<SuggestionRow>> {
        // A space tombstoned (its connection unlinked) is never shown again.
        let sql =
            format!("{SELECT} WHERE g.person = $1 AND s.status <> 'tombstoned' ORDER BY g.id DESC");
        let raws: Vec<RawSuggestion> = on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(person).fetch_all(pool).await?
        });
        raws.into_iter().map(TryInto::try_into).collect()
    }

    /// Requests sent to the ADMINs (to join a place, to create a project),
    /// newest first.
    pub async fn list_requests(&self) -> Result<Vec<SuggestionRow>> {
        let sql = format!(
            "{SELECT} WHERE g.state = 'accepted' AND g.kind IN ('request-to-join', 'request-to-create') ORDER BY g.id DESC"
        );
        let raws: Vec<RawSuggestion> = on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).fetch_all(pool).await?
        });
        raws.into_iter().map(TryInto::try_into).collect()
    }

    async fn suggestion_of(&self, person: &str, id: i64) -> Result<SuggestionRow> {
        let sql =
            format!("{SELECT} WHERE g.person = $1 AND g.id = $2 AND s.status <> 'tombstoned'");
        let raw: Option<RawSuggestion> = on_pool!(self, pool => {
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(person).bind(id).fetch_optional(pool).await?
        });
        // Another person's suggestion is not found: nobody learns it exists.
        raw.ok_or_else(|| RegistryError::not_found(format!("suggestion {id}")))?
            .try_into()
    }

    /// `person` accepts or declines their open suggestion `id`, audited as
    /// `actor`. Accepting a link files the space under the place in their
    /// manifest; accepting a request to join sends it to the ADMINs.
    pub async fn decide_suggestion(
        &self,
        person: &str,
        id: i64,
        answer: SuggestionAnswer,
        actor: &str,
    ) -> Result<SuggestionRow> {
        let before = self.suggestion_of(person, id).await?;
        if before.state != SuggestionState::Open {
            return Err(RegistryError::Invalid {
                what: format!("decision: suggestion {id} is already {}", before.state),
            });
        }
        let state = match answer {
            SuggestionAnswer::Accept => SuggestionState::Accepted,
            SuggestionAnswer::Decline => SuggestionState::Declined,
        };
        let now = now_ms();
        let action = match (answer, before.kind) {
            (SuggestionAnswer::Decline, _) => "suggestion.decline",
            (SuggestionAnswer::Accept, SuggestionKind::Link) => "suggestion.link",
            (SuggestionAnswer::Accept, _) => "suggestion.request-join",
        };
        let entry = NewAuditEntry {
            actor: actor.to_owned(),
            action: action.to_owned(),
            target: format!("suggestion:{id}"),
            reason: None,
            before: Some(serde_json::json!({ "state": before.state.as_str() })),
            after: Some(serde_json::json!({
                "person": person,
                "state": state.as_str(),
                "kind": before.kind.as_str(),
                "space": before.space_address.to_string(),
                "place_id": before.place_id,
            })),
        };
        let owner = Owner::Person(person.to_owned()).as_db();
        let link = answer == SuggestionAnswer::Accept && before.kind == SuggestionKind::Link;
        let detail =
            serde_json::json!({ "place_id": before.place_id, "person_link": true }).to_string();
        in_tx!(self, durable, tx => {
            let done = sqlx::query(
                "UPDATE suggestions SET state = $1, decided_by = $2, decided_at = $3, updated_at = $3 \
                 WHERE id = $4 AND person = $5 AND state = 'open'",
            )
            .bind(state.as_str()).bind(actor).bind(now).bind(id).bind(person)
            .execute(&mut *tx).await?;
            if done.rows_affected() != 1 {
                return Err(RegistryError::Invalid {
                    what: format!("decision: suggestion {id} was decided meanwhile"),
                });
            }
            if link {
                // The person's manifest changed: a feed row only they read.
                sqlx::query(
                    "INSERT INTO space_changes (kind, space_address, owner, detail, at) VALUES ('mapping-approved', $1, $2, $3, $4)",
                )
                .bind(before.space_address.to_string()).bind(&owner).bind(&detail).bind(now)
                .execute(&mut *tx).await?;
            }
            insert_audit!(&mut *tx, &entry, now)?;
        });
        self.suggestion_of(person, id).await
    }

    /// `person` asks an ADMIN to create a cMCP project for their private
    /// space `space` (named `name`, or the space's name). Refused when the
    /// space matches a place (an open or accepted suggestion says so) or is
    /// not theirs.
    pub async fn request_create(
        &self,
        person: &str,
        space: &SpaceAddress,
        name: Option<&str>,
        actor: &str,
    ) -> Result<SuggestionRow> {
        let theirs = self
            .get_space(space)
            .await?
            .filter(|s| s.owner == Owner::Person(person.to_owned()))
            .filter(|s| s.status != SpaceStatus::Tombstoned)
            .ok_or_else(|| RegistryError::not_found(format!("private space {space}")))?;
        let matched = self.list_suggestions(person).await?.into_iter().any(|s| {
            s.space_address == *space
                && s.kind != SuggestionKind::RequestToCreate
                && s.state != SuggestionState::Declined
        });
        if matched {
            return Err(RegistryError::Invalid {
                what: format!("request: {space} matches a place; answer its suggestion instead"),
            });
        }
        let name = name
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .unwrap_or(&theirs.display_name)
            .to_owned();
        if name.len() > 200 || name.chars().any(char::is_control) {
            return Err(RegistryError::Invalid {
                what: "project name (1 to 200 printable characters)".to_owned(),
            });
        }
        let now = now_ms();
        let entry = NewAuditEntry {
            actor: actor.to_owned(),
            action: "suggestion.request-create".to_owned(),
            target: format!("space:{space}"),
            reason: None,
            before: None,
            after: Some(serde_json::json!({ "person": person, "name": name })),
        };
        let evidence = serde_json::json!([{ "kind": "no-match", "name": theirs.display_name }]);
        let text = format!(
            "{} matches no place; asked to create project {name:?}",
            theirs.display_name
        );
        let id: i64 = in_tx!(self, durable, tx => {
            let (id,): (i64,) = sqlx::query_as(
                "INSERT INTO suggestions (person, space_address, target, kind, create_name, evidence_json, \
                 evidence_text, confidence, evidence_hash, state, created_at, updated_at, decided_by, decided_at) \
                 VALUES ($1, $2, $3, 'request-to-create', $4, $5, $6, 50, '', 'accepted', $7, $7, $8, $7) RETURNING id",
            )
            .bind(person).bind(space.to_string()).bind(CREATE_TARGET).bind(&name)
            .bind(evidence.to_string()).bind(&text).bind(now).bind(actor)
            .fetch_one(&mut *tx).await?;
            insert_audit!(&mut *tx, &entry, now)?;
            id
        });
        self.suggestion_of(person, id).await
    }

    /// The places `person` filed their spaces under by accepting links:
    /// space → (place id, kind, name), as the manifest reads them.
    pub(crate) async fn person_links(
        &self,
        person: &str,
    ) -> Result<HashMap<SpaceAddress, (String, String, String)>> {
        let rows: Vec<(String, String, String, String)> = on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT g.space_address, p.id, p.kind, p.name FROM suggestions g JOIN places p ON p.id = g.place_id \
                 WHERE g.person = $1 AND g.kind = 'link' AND g.state = 'accepted'",
            )
            .bind(person).fetch_all(pool).await?
        });
        Ok(rows
            .into_iter()
            .filter_map(|(a, id, kind, name)| Some((a.parse().ok()?, (id, kind, name))))
            .collect())
    }

    /// Every space private to `person` that is not tombstoned, with its
    /// name, for matching against the company's.
    pub async fn person_match_spaces(&self, person: &str) -> Result<Vec<super::MatchSpaceRow>> {
        let owner = Owner::Person(person.to_owned()).as_db();
        Ok(on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT address, kind, display_name, container FROM spaces WHERE status <> 'tombstoned' AND owner = $1 ORDER BY address",
            )
            .bind(&owner).fetch_all(pool).await?
        }))
    }

    /// The active aliases of `person`'s private spaces that matching
    /// compares.
    pub async fn person_match_aliases(&self, person: &str) -> Result<Vec<super::MatchAliasRow>> {
        let owner = Owner::Person(person.to_owned()).as_db();
        Ok(on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT a.space_address, a.kind, a.value FROM aliases a JOIN spaces s ON s.address = a.space_address \
                 WHERE a.valid_to IS NULL AND s.status <> 'tombstoned' AND s.owner = $1 \
                 AND a.kind IN ('key', 'git-remote', 'host-id', 'first-commit') ORDER BY a.space_address",
            )
            .bind(&owner).fetch_all(pool).await?
        }))
    }

    /// The people with a private space, for a round over everyone (after
    /// an import of places changed who belongs where).
    pub async fn people_with_private_spaces(&self) -> Result<Vec<String>> {
        let rows: Vec<(String,)> = on_pool!(self, pool => {
            sqlx::query_as("SELECT DISTINCT owner FROM spaces WHERE owner <> 'company' ORDER BY owner")
                .fetch_all(pool).await?
        });
        Ok(rows
            .into_iter()
            .filter_map(|(o,)| match Owner::from_db(&o) {
                Owner::Person(p) => Some(p),
                Owner::Company => None,
            })
            .collect())
    }
}
