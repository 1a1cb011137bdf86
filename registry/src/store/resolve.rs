//! Resolve what a tool sees (a remote in any spelling, a web URL, possibly
//! with a path inside the repo, a full name, a key, a bare id, a Drive
//! folder URL, a space address) to a space, ranked by how strongly the
//! fingerprint names it.
//!
//! Ranks, strongest first: the address itself; a stable or host id (a
//! Bitbucket uuid with or without braces, a Jira project id, a Drive folder
//! id, a GitHub node id); a remote or web URL (or root commit); a key; a
//! full name; a bare name or slug. Within a rank an active alias beats a
//! retired one, and a longer URL prefix beats a shorter one. Two spaces
//! tied at the best place are ambiguous: [`Store::resolve_one`] says so
//! rather than guess.

use std::collections::HashSet;

use cmcp_domain::{Alias, AliasKind, Platform, SpaceAddress, SpaceKind};
use serde::Serialize;

use super::manifest::PlaceRef;
use super::spaces::{AliasRow, RawAlias, RawSpace, SpaceRow};
use super::visibility::{Viewer, visible};
use super::{Store, on_pool, placeholders};
use crate::error::Result;

cmcp_domain::string_enum! {
    /// How strongly a fingerprint names a space, strongest first.
    pub enum MatchRank: "match rank" {
        Address = "address",
        /// A stable id or host id (uuid, Jira project id, Drive id, node id).
        Id = "id",
        /// A git remote, web URL or root commit.
        Url = "url",
        Key = "key",
        FullName = "full-name",
        /// A bare name or slug.
        Name = "name",
    }
}

impl MatchRank {
    fn of(kind: AliasKind) -> MatchRank {
        match kind {
            AliasKind::HostId => MatchRank::Id,
            AliasKind::GitRemote | AliasKind::WebUrl | AliasKind::FirstCommit => MatchRank::Url,
            AliasKind::Key => MatchRank::Key,
            AliasKind::FullName | AliasKind::Path => MatchRank::FullName,
            AliasKind::Name | AliasKind::Slug => MatchRank::Name,
        }
    }

    fn order(self) -> usize {
        MatchRank::ALL
            .iter()
            .position(|r| *r == self)
            .unwrap_or(usize::MAX)
    }
}

/// A space found for a fingerprint, with the alias that matched (none for
/// an address or stable id). `retired` says the match went through a name
/// the space no longer has.
#[derive(Debug, Clone, Serialize)]
pub struct Resolution {
    pub space: SpaceRow,
    pub alias: Option<AliasRow>,
    pub retired: bool,
    pub rank: MatchRank,
    /// The cMCP place the space is mapped to, directly or through its
    /// container (read in the same query).
    pub place: Option<PlaceRef>,
    /// Length of the matched URL (a path inside a repo matches the repo's
    /// URL as a prefix; the longest prefix wins).
    #[serde(skip)]
    specificity: usize,
}

impl Resolution {
    fn sort_key(&self) -> (usize, bool, std::cmp::Reverse<usize>) {
        (
            self.rank.order(),
            self.retired,
            std::cmp::Reverse(self.specificity),
        )
    }
}

/// The answer for one fingerprint.
#[derive(Debug, Clone)]
pub enum Resolved {
    Found(Box<Resolution>),
    /// Two or more spaces at the same rank: never a guess.
    Ambiguous(Vec<Resolution>),
    Unknown,
}

/// What a fingerprint could be, as lookups.
#[derive(Debug, Default, PartialEq)]
struct Probes {
    address: Option<SpaceAddress>,
    aliases: Vec<Alias>,
    /// Bare ids as pasted (braces removed), compared per kind.
    stable_ids: Vec<String>,
}

/// The path segments (at least two) that may name a repo inside a longer
/// URL: `host/a/b/tree/main/src` → `host/a/b/tree/main`, …, `host/a/b`.
fn url_prefixes(value: &str) -> Vec<String> {
    let parts: Vec<&str> = value.split('/').collect();
    (3..parts.len())
        .rev()
        .map(|n| parts[..n].join("/"))
        .collect()
}

/// A Drive folder id in a Drive URL: `…/drive/folders/ID`,
/// `…/drive/u/0/folders/ID`, `…?id=ID`.
fn drive_folder_id(input: &str) -> Option<String> {
    let rest = input.split_once("://").map_or(input, |(_, r)| r);
    let (host, path) = rest.split_once('/')?;
    let host = host.to_ascii_lowercase();
    if host.trim_start_matches("www.") != "drive.google.com" {
        return None;
    }
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    let from_path = path
        .split('/')
        .skip_while(|s| *s != "folders")
        .nth(1)
        .filter(|s| !s.is_empty());
    let from_query = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("id="))
        .filter(|s| !s.is_empty());
    from_path
        .or(from_query)
        .map(|id| id.split('#').next().unwrap_or(id).to_owned())
}

fn probes(input: &str) -> Probes {
    let input = input.trim();
    let mut p = Probes::default();
    if input.is_empty() {
        return p;
    }
    if let Ok(address) = input.parse::<SpaceAddress>() {
        p.address = Some(address);
        return p;
    }
    if let Some(id) = drive_folder_id(input) {
        p.stable_ids.push(id);
    }
    let mut seen = HashSet::new();
    let mut push = |p: &mut Probes, a: Alias| {
        if seen.insert((a.kind, a.value.clone())) {
            p.aliases.push(a);
        }
    };
    for a in Alias::candidates(input) {
        let url_like = matches!(a.kind, AliasKind::GitRemote | AliasKind::WebUrl);
        if url_like {
            let (host, path) = a.value.split_once('/').unwrap_or((&a.value, ""));
            let bare_host = host.strip_prefix("www.").unwrap_or(host);
            let value = if path.is_empty() {
                bare_host.to_owned()
            } else {
                format!("{bare_host}/{path}")
            };
            for v in std::iter::once(value.clone()).chain(url_prefixes(&value)) {
                push(
                    &mut p,
                    Alias {
                        kind: a.kind,
                        value: v,
                        raw: a.raw.clone(),
                    },
                );
            }
        }
        push(&mut p, a);
    }
    let bare = !input.contains(['/', ':', ' ', '\t']);
    if bare {
        let id = input.trim_start_matches('{').trim_end_matches('}');
        if !id.is_empty() && !p.stable_ids.iter().any(|s| s == id) {
            p.stable_ids.push(id.to_owned());
        }
    }
    p
}

/// A stored stable id equals the pasted one under the kind's own rules
/// (Drive ids are case-sensitive, the others are canonical lower-case).
fn same_id(kind: SpaceKind, stored: &str, pasted: &str) -> bool {
    if kind.platform() == Platform::Drive {
        stored == pasted
    } else {
        stored == kind.canonical_id(pasted)
    }
}

/// The approved mappings of a space and of its container, with their
/// places: joined into every resolve query so an answer costs one round
/// trip.
#[derive(sqlx::FromRow)]
pub(super) struct RawPlaces {
    pub(super) own_place_id: Option<String>,
    pub(super) own_place_kind: Option<String>,
    pub(super) own_place_name: Option<String>,
    pub(super) up_place_id: Option<String>,
    pub(super) up_place_kind: Option<String>,
    pub(super) up_place_name: Option<String>,
}

impl RawPlaces {
    fn place(self, space: &SpaceRow) -> Option<PlaceRef> {
        let own = (self.own_place_id, self.own_place_kind, self.own_place_name);
        let up = (self.up_place_id, self.up_place_kind, self.up_place_name);
        let (via, (id, kind, name)) = match (own, up, &space.container) {
            ((Some(i), Some(k), Some(n)), _, _) => (space.address.clone(), (i, k, n)),
            (_, (Some(i), Some(k), Some(n)), Some(c)) => (c.clone(), (i, k, n)),
            _ => return None,
        };
        Some(PlaceRef {
            path: format!("{kind}/{id}"),
            id,
            kind,
            name,
            via,
        })
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct RawHit {
    #[sqlx(flatten)]
    pub(super) alias: RawAlias,
    #[sqlx(flatten)]
    pub(super) space: RawSpace,
    #[sqlx(flatten)]
    pub(super) places: RawPlaces,
}

#[derive(sqlx::FromRow)]
pub(super) struct RawSpaceHit {
    #[sqlx(flatten)]
    pub(super) space: RawSpace,
    #[sqlx(flatten)]
    pub(super) places: RawPlaces,
}

const ALIAS_PART: &str = "a.id, a.space_address, a.kind, a.value, a.raw, a.valid_from, a.valid_to";
const SPACE_PART: &str = "s.address, s.connection_id, s.owner, s.display_name, s.container, s.status, \
    s.archived, s.trashed, s.visibility, s.first_seen_at, s.last_changed_at, s.missing_since, s.tombstoned_at";
const PLACE_PART: &str = "ps.id AS own_place_id, ps.kind AS own_place_kind, ps.name AS own_place_name, \
    pc.id AS up_place_id, pc.kind AS up_place_kind, pc.name AS up_place_name";
const PLACE_JOINS: &str = "LEFT JOIN mappings ms ON ms.space_address = s.address \
    LEFT JOIN places ps ON ps.id = ms.place_id \
    LEFT JOIN mappings mc ON mc.space_address = s.container \
    LEFT JOIN places pc ON pc.id = mc.place_id";

impl RawSpaceHit {
    fn resolution(self, rank: MatchRank) -> Result<Resolution> {
        let space: SpaceRow = self.space.try_into()?;
        Ok(Resolution {
            place: self.places.place(&space),
            space,
            alias: None,
            retired: false,
            rank,
            specificity: 0,
        })
    }
}

/// One statement of a resolve: its text and its binds (all text).
pub(super) struct Lookup {
    pub sql: String,
    pub binds: Vec<String>,
}

/// The statements a fingerprint needs: by address, by alias, by stable
/// id. Each is run by whichever reader answers (the pool, or the SQLite
/// inline reader of [`super::inline_reads`]); [`ResolvePlan::finish`]
/// ranks what they found.
pub(super) struct ResolvePlan {
    probes: Probes,
    pub by_address: Option<Lookup>,
    pub by_alias: Option<Lookup>,
    pub by_id: Option<Lookup>,
}

/// The rows the statements of a [`ResolvePlan`] found.
#[derive(Default)]
pub(super) struct Found {
    pub by_address: Option<RawSpaceHit>,
    pub by_alias: Vec<RawHit>,
    pub by_id: Vec<RawSpaceHit>,
}

impl ResolvePlan {
    pub fn new(input: &str) -> ResolvePlan {
        let probes = probes(input);
        let by_address = probes.address.as_ref().map(|address| Lookup {
            sql: format!(
                "SELECT {SPACE_PART}, {PLACE_PART} FROM spaces s {PLACE_JOINS} WHERE s.address = $1"
            ),
            binds: vec![address.to_string()],
        });
        let by_alias = (!probes.aliases.is_empty()).then(|| {
            let pairs: Vec<String> = (0..probes.aliases.len())
                .map(|i| format!("(a.kind = ${} AND a.value = ${})", 2 * i + 1, 2 * i + 2))
                .collect();
            Lookup {
                sql: format!(
                    "SELECT {ALIAS_PART}, {SPACE_PART}, {PLACE_PART} FROM aliases a \
                     JOIN spaces s ON s.address = a.space_address {PLACE_JOINS} WHERE {}",
                    pairs.join(" OR ")
                ),
                binds: probes
                    .aliases
                    .iter()
                    .flat_map(|a| [a.kind.as_str().to_owned(), a.value.clone()])
                    .collect(),
            }
        });
        let by_id = (!probes.stable_ids.is_empty()).then(|| {
            let mut wanted: Vec<String> = Vec::new();
            for id in &probes.stable_ids {
                wanted.push(id.clone());
                wanted.push(id.to_lowercase());
            }
            wanted.dedup();
            Lookup {
                sql: format!(
                    "SELECT {SPACE_PART}, {PLACE_PART} FROM spaces s {PLACE_JOINS} WHERE s.stable_id IN ({})",
                    placeholders(1, wanted.len())
                ),
                binds: wanted,
            }
        });
        ResolvePlan {
            probes,
            by_address,
            by_alias,
            by_id,
        }
    }

    /// Every space found that `viewer` may see (`None`: every owner),
    /// strongest match first, each space once.
    pub fn finish(self, found: Found, viewer: Option<&Viewer>) -> Result<Vec<Resolution>> {
        let mut all: Vec<Resolution> = Vec::new();
        if let Some(raw) = found.by_address {
            all.push(raw.resolution(MatchRank::Address)?);
        }
        for raw in found.by_alias {
            let alias = AliasRow::try_from(raw.alias)?;
            let space: SpaceRow = raw.space.try_into()?;
            all.push(Resolution {
                place: raw.places.place(&space),
                space,
                retired: !alias.is_active(),
                rank: MatchRank::of(alias.kind),
                specificity: alias.value.len(),
                alias: Some(alias),
            });
        }
        for raw in found.by_id {
            let r = raw.resolution(MatchRank::Id)?;
            let kind = r.space.address.kind();
            let stored = r.space.address.stable_id();
            if self
                .probes
                .stable_ids
                .iter()
                .any(|p| same_id(kind, stored, p))
            {
                all.push(r);
            }
        }
        all.retain(|r| visible(viewer, &r.space.owner));
        // Strongest first; among retired matches the most recently retired.
        all.sort_by_key(|r| {
            (
                r.sort_key(),
                std::cmp::Reverse(r.alias.as_ref().and_then(|a| a.valid_to)),
            )
        });
        let mut seen = HashSet::new();
        all.retain(|r| seen.insert(r.space.address.clone()));
        Ok(all)
    }
}

/// The one space among `found` (strongest first), or every space tied at
/// the strongest match.
pub(super) fn pick(found: Vec<Resolution>) -> Resolved {
    let Some(best) = found.first().map(Resolution::sort_key) else {
        return Resolved::Unknown;
    };
    let mut tied: Vec<Resolution> = found.into_iter().filter(|r| r.sort_key() == best).collect();
    if tied.len() == 1 {
        Resolved::Found(Box::new(tied.remove(0)))
    } else {
        Resolved::Ambiguous(tied)
    }
}

impl Store {
    /// Every space a fingerprint could name, strongest match first, each
    /// space once; for the operator (every owner).
    pub async fn resolve(&self, input: &str) -> Result<Vec<Resolution>> {
        self.resolve_as(input, None).await
    }

    /// Every space a fingerprint could name that `viewer` may see (`None`:
    /// every owner), strongest match first, each space once.
    pub async fn resolve_as(
        &self,
        input: &str,
        viewer: Option<&Viewer>,
    ) -> Result<Vec<Resolution>> {
        let plan = ResolvePlan::new(input);
        let mut found = Found::default();
        if let Some(l) = &plan.by_address {
            found.by_address = self.lookup(l).await?.pop();
        }
        if let Some(l) = &plan.by_alias {
            found.by_alias = self.lookup(l).await?;
        }
        if let Some(l) = &plan.by_id {
            found.by_id = self.lookup(l).await?;
        }
        plan.finish(found, viewer)
    }

    /// The one space a fingerprint names for `viewer`, or every space tied
    /// at the strongest match.
    pub async fn resolve_one(&self, input: &str, viewer: Option<&Viewer>) -> Result<Resolved> {
        Ok(pick(self.resolve_as(input, viewer).await?))
    }
}

impl Store {
    /// Every row of one lookup of a resolve, through the pool.
    async fn lookup<O>(&self, l: &Lookup) -> Result<Vec<O>>
    where
        O: for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow>
            + for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>
            + Send
            + Unpin,
    {
        Ok(on_pool!(self, pool => {
            let mut q = sqlx::query_as(sqlx::AssertSqlSafe(l.sql.as_str()));
            for b in &l.binds {
                q = q.bind(b);
            }
            q.fetch_all(pool).await?
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(p: &Probes, kind: AliasKind) -> Vec<&str> {
        p.aliases
            .iter()
            .filter(|a| a.kind == kind)
            .map(|a| a.value.as_str())
            .collect()
    }

    #[test]
    fn a_url_inside_a_repo_looks_up_its_prefixes() {
        let p = probes("https://www.github.com/Acme/Repo/tree/main/src");
        let web = values(&p, AliasKind::WebUrl);
        assert!(web.contains(&"github.com/acme/repo"), "{web:?}");
        assert!(
            web.contains(&"github.com/acme/repo/tree/main/src"),
            "{web:?}"
        );
        assert!(!web.contains(&"github.com/acme"), "{web:?}");
    }

    #[test]
    fn bare_and_braced_ids_are_stable_id_probes() {
        let p = probes("{1B2C3D4E-0000-4000-8000-000000000001}");
        assert_eq!(p.stable_ids, vec!["1B2C3D4E-0000-4000-8000-000000000001"]);
        let p = probes("10001");
        assert_eq!(p.stable_ids, vec!["10001"]);
        assert!(values(&p, AliasKind::Key).contains(&"10001"));
    }

    #[test]
    fn drive_urls_give_their_folder_id() {
        for url in [
            "https://drive.google.com/drive/folders/1AbC_dEf",
            "https://drive.google.com/drive/u/0/folders/1AbC_dEf?usp=sharing",
            "https://drive.google.com/open?id=1AbC_dEf",
        ] {
            assert_eq!(drive_folder_id(url).as_deref(), Some("1AbC_dEf"), "{url}");
        }
        assert_eq!(drive_folder_id("https://github.com/a/b"), None);
    }

    #[test]
    fn an_address_is_looked_up_as_itself() {
        let p = probes("space:github-repo:github.com/8");
        assert!(p.address.is_some());
        assert!(p.aliases.is_empty());
    }

    #[test]
    fn ranks_run_from_address_to_bare_name() {
        let order: Vec<usize> = [
            MatchRank::Address,
            MatchRank::Id,
            MatchRank::Url,
            MatchRank::Key,
            MatchRank::FullName,
            MatchRank::Name,
        ]
        .iter()
        .map(|r| r.order())
        .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(MatchRank::of(AliasKind::Key), MatchRank::Key);
    }
}
