//! A person's space manifest: every space the person may see (company
//! spaces and their own private ones, tombstoned ones left out) with what
//! recognises it on their machine, so the person's helper can match local
//! folders without asking the server each time.
//!
//! The version is a position in the change feed taken before the spaces are
//! read, so a change made while the manifest is built is reported again by
//! the next diff rather than lost. A diff (`since`) reads the feed between
//! the two versions; one that would span more than `max_diff` changes, or
//! names a version this store never gave, answers the whole manifest and
//! says so.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use cmcp_domain::{AliasKind, Owner, Platform, SpaceAddress, SpaceKind, SpaceStatus};
use serde::Serialize;

use super::changes::{ChangeKind, Cursor};
use super::spaces::{ALIAS_COLUMNS, AliasRow, RawAlias, RawSpace, SPACE_COLUMNS, SpaceRow};
use super::visibility::Viewer;
use super::{Store, marks, on_pool, placeholders};
use crate::error::Result;

/// Addresses per statement when reading part of a manifest.
const CHUNK: usize = 500;

/// One way to recognise a space on a person's machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Recogniser {
    /// An alias kind (`git-remote`, `first-commit`, `host-id`, `key`) or
    /// `drive-folder-id`.
    pub kind: String,
    /// The lookup form.
    pub value: String,
    /// For a remote: the spellings git prints that fold to `value`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub spellings: Vec<String>,
}

/// The cMCP place a space is mapped to, directly or through its container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlaceRef {
    pub id: String,
    pub kind: String,
    pub name: String,
    /// `kind/id`: where the person's helper files the space.
    pub path: String,
    /// The space whose mapping this is (the space itself or its container).
    pub via: SpaceAddress,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ManifestEntry {
    pub address: SpaceAddress,
    pub kind: SpaceKind,
    pub display_name: String,
    pub owner: Owner,
    pub status: SpaceStatus,
    pub recognisers: Vec<Recogniser>,
    /// Retired recognisers: they still resolve, and say so.
    pub retired: Vec<Recogniser>,
    pub place: Option<PlaceRef>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Manifest {
    pub person: String,
    pub version: Cursor,
    /// `true`: `spaces` is the whole manifest (no `since`, or one too old
    /// to diff); `false`: `added`, `changed` and `removed` are the diff.
    pub full: bool,
    /// A `since` was given but could not be diffed.
    pub too_old: bool,
    pub spaces: Vec<ManifestEntry>,
    pub added: Vec<ManifestEntry>,
    pub changed: Vec<ManifestEntry>,
    pub removed: Vec<SpaceAddress>,
}

/// The alias kinds a person's machine can observe.
fn recognises(kind: AliasKind) -> bool {
    matches!(
        kind,
        AliasKind::GitRemote | AliasKind::FirstCommit | AliasKind::HostId | AliasKind::Key
    )
}

/// The spellings of `host/path` that git prints and the normaliser folds
/// back to it.
fn remote_spellings(value: &str) -> Vec<String> {
    let Some((host, path)) = value.split_once('/') else {
        return Vec::new();
    };
    vec![
        format!("https://{host}/{path}.git"),
        format!("https://{host}/{path}"),
        format!("git@{host}:{path}.git"),
        format!("ssh://git@{host}/{path}.git"),
    ]
}

fn recogniser(a: &AliasRow) -> Recogniser {
    Recogniser {
        kind: a.kind.as_str().to_owned(),
        value: a.value.clone(),
        spellings: if a.kind == AliasKind::GitRemote {
            remote_spellings(&a.value)
        } else {
            Vec::new()
        },
    }
}

fn entry(
    space: SpaceRow,
    aliases: &[AliasRow],
    places: &HashMap<SpaceAddress, (String, String, String)>,
) -> ManifestEntry {
    let mut recognisers: Vec<Recogniser> = Vec::new();
    let mut retired: Vec<Recogniser> = Vec::new();
    if space.address.kind().platform() == Platform::Drive {
        recognisers.push(Recogniser {
            kind: "drive-folder-id".to_owned(),
            value: space.address.stable_id().to_owned(),
            spellings: Vec::new(),
        });
    }
    for a in aliases.iter().filter(|a| recognises(a.kind)) {
        if a.is_active() {
            recognisers.push(recogniser(a));
        } else {
            retired.push(recogniser(a));
        }
    }
    let place = std::iter::once(&space.address)
        .chain(space.container.as_ref())
        .find_map(|via| {
            places.get(via).map(|(id, kind, name)| PlaceRef {
                path: format!("{kind}/{id}"),
                id: id.clone(),
                kind: kind.clone(),
                name: name.clone(),
                via: via.clone(),
            })
        });
    ManifestEntry {
        kind: space.address.kind(),
        address: space.address,
        display_name: space.display_name,
        owner: space.owner,
        status: space.status,
        recognisers,
        retired,
        place,
    }
}

impl Store {
    /// `person`'s manifest: whole, or the difference since `since`.
    pub async fn manifest(
        &self,
        person: &str,
        since: Option<Cursor>,
        max_diff: i64,
    ) -> Result<Manifest> {
        let version = self.change_head().await?;
        let viewer = Viewer::Person(person.to_owned());
        let mut m = Manifest {
            person: person.to_owned(),
            version,
            full: true,
            too_old: false,
            spaces: Vec::new(),
            added: Vec::new(),
            changed: Vec::new(),
            removed: Vec::new(),
        };
        if let Some(since) = since {
            // A version older than what the feed keeps cannot be diffed:
            // the pruned changes are not there to read.
            let pruned = self.is_pruned_past(since).await?.is_some();
            let changes = if since <= version && !pruned {
                Some(
                    self.raw_changes(since, Some(version), max_diff.max(0) + 1)
                        .await?,
                )
            } else {
                None
            };
            match changes {
                Some(changes) if changes.len() as i64 <= max_diff => {
                    let mut created = BTreeSet::new();
                    let mut touched = BTreeSet::new();
                    for c in changes.iter().filter(|c| viewer.may_see(&c.owner)) {
                        if c.kind == ChangeKind::SpaceCreated {
                            created.insert(c.address.clone());
                        }
                        touched.insert(c.address.clone());
                    }
                    let addresses: Vec<SpaceAddress> = touched.into_iter().collect();
                    let now: BTreeMap<SpaceAddress, ManifestEntry> = self
                        .manifest_entries(person, Some(&addresses))
                        .await?
                        .into_iter()
                        .map(|e| (e.address.clone(), e))
                        .collect();
                    for a in addresses {
                        match now.get(&a) {
                            Some(e) if created.contains(&a) => m.added.push(e.clone()),
                            Some(e) => m.changed.push(e.clone()),
                            None => m.removed.push(a),
                        }
                    }
                    m.full = false;
                    return Ok(m);
                }
                _ => m.too_old = true,
            }
        }
        m.spaces = self.manifest_entries(person, None).await?;
        Ok(m)
    }

    /// The entries `person` may see, of `only` these addresses or of all.
    async fn manifest_entries(
        &self,
        person: &str,
        only: Option<&[SpaceAddress]>,
    ) -> Result<Vec<ManifestEntry>> {
        let owner = Owner::Person(person.to_owned()).as_db();
        let visible = "(owner = 'company' OR owner = $1) AND status <> 'tombstoned'";
        let mut spaces: Vec<SpaceRow> = Vec::new();
        match only {
            None => {
                let sql =
                    format!("SELECT {SPACE_COLUMNS} FROM spaces WHERE {visible} ORDER BY address");
                let raws: Vec<RawSpace> = on_pool!(self, pool => {
                    sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(&owner).fetch_all(pool).await?
                });
                for raw in raws {
                    spaces.push(raw.try_into()?);
                }
            }
            Some(list) => {
                for chunk in list.chunks(CHUNK) {
                    let sql = format!(
                        "SELECT {SPACE_COLUMNS} FROM spaces WHERE {visible} AND address IN ({}) ORDER BY address",
                        placeholders(2, chunk.len())
                    );
                    let raws: Vec<RawSpace> = on_pool!(self, pool => {
                        let mut q = sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(&owner);
                        for a in chunk {
                            q = q.bind(a.to_string());
                        }
                        q.fetch_all(pool).await?
                    });
                    for raw in raws {
                        spaces.push(raw.try_into()?);
                    }
                }
            }
        }
        // Aliases by address (the `aliases_by_space` index), never by a
        // scan joined to the visibility filter.
        let mut aliases: HashMap<SpaceAddress, Vec<AliasRow>> = HashMap::new();
        for chunk in spaces.chunks(CHUNK) {
            let sql = format!(
                "SELECT {ALIAS_COLUMNS} FROM aliases WHERE space_address IN ({}) ORDER BY id",
                marks(self.backend(), 1, chunk.len())
            );
            let raws: Vec<RawAlias> = on_pool!(self, pool => {
                let mut q = sqlx::query_as(sqlx::AssertSqlSafe(sql));
                for s in chunk {
                    q = q.bind(s.address.to_string());
                }
                q.fetch_all(pool).await?
            });
            for raw in raws {
                let a = AliasRow::try_from(raw)?;
                aliases.entry(a.space_address.clone()).or_default().push(a);
            }
        }
        // The company's mappings, and the links this person accepted for
        // their own spaces (only they see those spaces).
        let mut places = self.mapped_places().await?;
        places.extend(self.person_links(person).await?);
        let none = Vec::new();
        Ok(spaces
            .into_iter()
            .map(|s| {
                let a = aliases.get(&s.address).unwrap_or(&none);
                entry(s, a, &places)
            })
            .collect())
    }

    /// Approved mappings with their place: space → (place id, kind, name).
    pub(crate) async fn mapped_places(
        &self,
    ) -> Result<HashMap<SpaceAddress, (String, String, String)>> {
        let rows: Vec<(String, String, String, String)> = on_pool!(self, pool => {
            sqlx::query_as(
                "SELECT m.space_address, p.id, p.kind, p.name FROM mappings m JOIN places p ON p.id = m.place_id",
            )
            .fetch_all(pool).await?
        });
        Ok(rows
            .into_iter()
            .filter_map(|(a, id, kind, name)| Some((a.parse().ok()?, (id, kind, name))))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_remote_spelling_folds_back() {
        for s in remote_spellings("github.com/acme/repo") {
            assert_eq!(
                cmcp_domain::normalise_git_remote(&s).as_deref(),
                Some("github.com/acme/repo"),
                "{s}"
            );
        }
    }
}
