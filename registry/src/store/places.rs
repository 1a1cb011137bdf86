//! cMCP's places (projects, teams, clients) as the ADMIN loads them: one
//! bulk, idempotent import. A place missing from the set is retired, never
//! deleted, so mappings that point at it stay valid; a changed key keeps the
//! old key as a retired alias so a container still keyed the old way matches
//! (and says so).

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use sqlx::AssertSqlSafe;

use super::audit::{NewAuditEntry, insert_audit};
use super::{Store, in_tx, now_ms, on_pool};
use crate::error::{RegistryError, Result};

/// One place as the import file / `PUT /v1/places` gives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlaceInput {
    pub id: String,
    /// project, team or client.
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub key: Option<String>,
    /// Extra names the place is known by.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// The person ids that belong to the place: a suggestion to it is a
    /// link for them and a request to join for anyone else. Absent keeps
    /// the members the place has; a list (even empty) replaces them.
    #[serde(default)]
    pub members: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlaceRow {
    pub id: String,
    pub kind: String,
    pub name: String,
    pub key: Option<String>,
    pub status: String,
    pub retired_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl PlaceRow {
    pub fn is_retired(&self) -> bool {
        self.status == "retired"
    }
}

cmcp_domain::string_enum! {
    /// What a place alias is: its key (the current or a retired one) or
    /// another name it is known by.
    pub enum PlaceAliasKind: "place alias kind" {
        Key = "key",
        Name = "name",
    }
}

/// `valid_to` set means retired.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct PlaceAliasRow {
    pub place_id: String,
    #[sqlx(try_from = "String")]
    pub kind: PlaceAliasKind,
    pub value: String,
    pub raw: String,
    pub valid_to: Option<i64>,
}

/// What an import changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PlaceFigures {
    pub created: u64,
    pub updated: u64,
    pub unchanged: u64,
    pub retired: u64,
}

/// The columns of a [`RawPlace`].
pub(super) const PLACE_COLUMNS: &str =
    "id, kind, name, place_key, status, retired_at, created_at, updated_at";

#[derive(sqlx::FromRow)]
pub(super) struct RawPlace {
    id: String,
    kind: String,
    name: String,
    place_key: Option<String>,
    status: String,
    retired_at: Option<i64>,
    created_at: i64,
    updated_at: i64,
}

impl From<RawPlace> for PlaceRow {
    fn from(r: RawPlace) -> Self {
        PlaceRow {
            id: r.id,
            kind: r.kind,
            name: r.name,
            key: r.place_key,
            status: r.status,
            retired_at: r.retired_at,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

const PLACE_KINDS: [&str; 3] = ["project", "team", "client"];

/// Keys compare upper-case without surrounding blanks.
pub fn normalise_place_key(raw: &str) -> String {
    raw.trim().to_uppercase()
}

/// Names compare lower-case with spaces, dashes, underscores and dots gone.
pub fn normalise_place_name(raw: &str) -> String {
    raw.chars()
        .filter(|c| !matches!(c, ' ' | '-' | '_' | '.' | '\t'))
        .flat_map(char::to_lowercase)
        .collect()
}

fn validate(p: &PlaceInput) -> Result<()> {
    let invalid = |what: String| Err(RegistryError::Invalid { what });
    if p.id.trim().is_empty() || p.id.len() > 200 {
        return invalid(format!("place id {:?}", p.id));
    }
    if !PLACE_KINDS.contains(&p.kind.as_str()) {
        return invalid(format!(
            "place kind {:?} of {} (project, team or client)",
            p.kind, p.id
        ));
    }
    if p.name.trim().is_empty() {
        return invalid(format!("empty name of place {}", p.id));
    }
    for m in p.members.iter().flatten() {
        let m = m.trim();
        if m.is_empty() || m.len() > 200 || m.chars().any(char::is_control) {
            return invalid(format!("member {m:?} of place {}", p.id));
        }
    }
    Ok(())
}

/// The alias rows a place should have active: its key and extra names.
fn wanted_aliases(p: &PlaceInput) -> BTreeSet<(PlaceAliasKind, String, String)> {
    let mut out = BTreeSet::new();
    if let Some(k) = p.key.as_deref().filter(|k| !k.trim().is_empty()) {
        out.insert((
            PlaceAliasKind::Key,
            normalise_place_key(k),
            k.trim().to_owned(),
        ));
    }
    for a in &p.aliases {
        let v = normalise_place_name(a);
        if !v.is_empty() {
            out.insert((PlaceAliasKind::Name, v, a.trim().to_owned()));
        }
    }
    out
}

impl Store {
    /// Load the complete set of places: create new ones, update changed
    /// ones, retire the ones not in the set; audited as one entry.
    pub async fn put_places(&self, places: &[PlaceInput], actor: &str) -> Result<PlaceFigures> {
        let mut seen = BTreeSet::new();
        for p in places {
            validate(p)?;
            if !seen.insert(p.id.as_str()) {
                return Err(RegistryError::Invalid {
                    what: format!("place {} listed twice", p.id),
                });
            }
        }
        let now = now_ms();
        let mut figures = PlaceFigures::default();
        in_tx!(self, durable, tx => {
            let existing: Vec<RawPlace> = sqlx::query_as(
                "SELECT id, kind, name, place_key, status, retired_at, created_at, updated_at FROM places",
            )
            .fetch_all(&mut *tx)
            .await?;
            let existing: HashMap<String, PlaceRow> =
                existing.into_iter().map(|r| (r.id.clone(), PlaceRow::from(r))).collect();
            let aliases: Vec<PlaceAliasRow> = sqlx::query_as(
                "SELECT place_id, kind, value, raw, valid_to FROM place_aliases WHERE valid_to IS NULL",
            )
            .fetch_all(&mut *tx)
            .await?;
            let mut active: HashMap<String, BTreeSet<(PlaceAliasKind, String, String)>> = HashMap::new();
            for a in aliases {
                active.entry(a.place_id).or_default().insert((a.kind, a.value, a.raw));
            }
            let member_rows: Vec<(String, String)> =
                sqlx::query_as("SELECT place_id, person FROM place_members")
                    .fetch_all(&mut *tx)
                    .await?;
            let mut members: HashMap<String, BTreeSet<String>> = HashMap::new();
            for (place, person) in member_rows {
                members.entry(place).or_default().insert(person);
            }
            for p in places {
                let key = p.key.as_deref().map(str::trim).filter(|k| !k.is_empty());
                let want = wanted_aliases(p);
                let have = active.remove(&p.id).unwrap_or_default();
                let had_members = members.remove(&p.id).unwrap_or_default();
                let want_members: BTreeSet<String> = match &p.members {
                    None => had_members.clone(),
                    Some(list) => list.iter().map(|m| m.trim().to_owned()).collect(),
                };
                for gone in had_members.difference(&want_members) {
                    sqlx::query("DELETE FROM place_members WHERE place_id = $1 AND person = $2")
                        .bind(&p.id).bind(gone)
                        .execute(&mut *tx).await?;
                }
                let joined: Vec<&String> = want_members.difference(&had_members).collect();
                match existing.get(&p.id) {
                    None => {
                        sqlx::query(
                            "INSERT INTO places (id, kind, name, place_key, status, created_at, updated_at) \
                             VALUES ($1, $2, $3, $4, 'active', $5, $5)",
                        )
                        .bind(&p.id).bind(&p.kind).bind(p.name.trim()).bind(key).bind(now)
                        .execute(&mut *tx).await?;
                        figures.created += 1;
                        for person in &joined {
                            sqlx::query("INSERT INTO place_members (place_id, person, added_at) VALUES ($1, $2, $3)")
                                .bind(&p.id).bind(*person).bind(now)
                                .execute(&mut *tx).await?;
                        }
                    }
                    Some(row) => {
                        let same = row.kind == p.kind
                            && row.name == p.name.trim()
                            && row.key.as_deref() == key
                            && !row.is_retired()
                            && have == want
                            && had_members == want_members;
                        for person in &joined {
                            sqlx::query("INSERT INTO place_members (place_id, person, added_at) VALUES ($1, $2, $3)")
                                .bind(&p.id).bind(*person).bind(now)
                                .execute(&mut *tx).await?;
                        }
                        if same {
                            figures.unchanged += 1;
                            continue;
                        }
                        sqlx::query(
                            "UPDATE places SET kind = $1, name = $2, place_key = $3, status = 'active', \
                             retired_at = NULL, updated_at = $4 WHERE id = $5",
                        )
                        .bind(&p.kind).bind(p.name.trim()).bind(key).bind(now).bind(&p.id)
                        .execute(&mut *tx).await?;
                        figures.updated += 1;
                    }
                }
                for (kind, value, _) in have.difference(&want) {
                    sqlx::query(
                        "UPDATE place_aliases SET valid_to = $1 WHERE place_id = $2 AND kind = $3 \
                         AND value = $4 AND valid_to IS NULL",
                    )
                    .bind(now).bind(&p.id).bind(kind.as_str()).bind(value)
                    .execute(&mut *tx).await?;
                }
                for (kind, value, raw) in want.difference(&have) {
                    sqlx::query(
                        "INSERT INTO place_aliases (place_id, kind, value, raw, valid_from) \
                         VALUES ($1, $2, $3, $4, $5)",
                    )
                    .bind(&p.id).bind(kind.as_str()).bind(value).bind(raw).bind(now)
                    .execute(&mut *tx).await?;
                }
            }
            for (id, row) in &existing {
                if !row.is_retired() && !seen.contains(id.as_str()) {
                    sqlx::query(
                        "UPDATE places SET status = 'retired', retired_at = $1, updated_at = $1 WHERE id = $2",
                    )
                    .bind(now).bind(id)
                    .execute(&mut *tx).await?;
                    figures.retired += 1;
                }
            }
            let entry = NewAuditEntry {
                actor: actor.to_owned(),
                action: "places.import".to_owned(),
                target: "places".to_owned(),
                reason: None,
                before: None,
                after: Some(serde_json::json!({
                    "places": places.len(),
                    "created": figures.created,
                    "updated": figures.updated,
                    "unchanged": figures.unchanged,
                    "retired": figures.retired,
                })),
            };
            insert_audit!(&mut *tx, &entry, now)?;
        });
        Ok(figures)
    }

    /// Every place, active and retired, by id.
    pub async fn list_places(&self) -> Result<Vec<PlaceRow>> {
        let sql = format!("SELECT {PLACE_COLUMNS} FROM places ORDER BY id");
        let raws: Vec<RawPlace> = on_pool!(self, pool => {
            sqlx::query_as(AssertSqlSafe(sql)).fetch_all(pool).await?
        });
        Ok(raws.into_iter().map(PlaceRow::from).collect())
    }

    /// The ids of the places `person` is a member of.
    pub async fn places_of(&self, person: &str) -> Result<BTreeSet<String>> {
        let rows: Vec<(String,)> = on_pool!(self, pool => {
            sqlx::query_as("SELECT place_id FROM place_members WHERE person = $1")
                .bind(person).fetch_all(pool).await?
        });
        Ok(rows.into_iter().map(|(p,)| p).collect())
    }

    /// The members of `place`, by person id.
    pub async fn place_members(&self, place: &str) -> Result<Vec<String>> {
        let rows: Vec<(String,)> = on_pool!(self, pool => {
            sqlx::query_as("SELECT person FROM place_members WHERE place_id = $1 ORDER BY person")
                .bind(place).fetch_all(pool).await?
        });
        Ok(rows.into_iter().map(|(p,)| p).collect())
    }

    /// Every alias of every place, retired ones included.
    pub async fn list_place_aliases(&self) -> Result<Vec<PlaceAliasRow>> {
        Ok(on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT place_id, kind, value, raw, valid_to FROM place_aliases ORDER BY place_id, id",
            )
            .fetch_all(pool)
            .await?
        }))
    }
}
