//! Matching that scales with the change, not the registry: after a sync
//! only the containers a change can reach are run through the ladder,
//! reading only what they need by index.
//!
//! What changed comes from the change feed after the ladder's stored
//! position (spaces created, aliases added or retired, state and owner
//! changes, mappings approved or undone) and from `matching_dirty` (renames
//! and container moves, which the feed does not carry, and ADMIN
//! decisions). A container's proposals depend on
//!
//! 1. its own row, key and mapping;
//! 2. mappings of its stable id under another address;
//! 3. its children (names for the Jira rung, fingerprints), of which only
//!    those with a name or fingerprint that can give evidence are read;
//! 4. spaces sharing a fingerprint with it or a child, with their mapping
//!    and their container's mapping;
//! 5. mapped Jira projects whose key heads a child's name;
//! 6. the places (indexed whole: the fuzzy rung's trigram postings are
//!    global; the index is kept in memory while the places' version token
//!    stays, and a changed token means a full recompute first).
//!
//! [`affected`] turns each changed space back into the containers whose
//! inputs it is part of, old and new (a moved repo's old container, a
//! retired remote's old value), and [`neighbourhood`] reads 1–5 for them.
//! A backlog above [`MAX_BACKLOG`] (a first sync, a long outage) runs the
//! full recompute instead, and so do places changed since the last full
//! recompute (a places import recomputes at once; this catches one whose
//! recompute failed).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use cmcp_domain::{AliasKind, Owner, SpaceAddress, SpaceKind};
use cmcp_registry::store::normalise_place_key;
use cmcp_registry::{ChangeKind, ChangeRow, MatchBacklog, ProposalFigures, Store};

use crate::Result;
use crate::ladder::{PlaceIndex, Settings, jira_prefix, propose_for};
use crate::refresh::{
    in_turn, load_places, mappings_from_rows, recompute, refresh_proposals, spaces_from_rows,
    to_rows,
};
use crate::suggest::{people_reached, refresh_each};

/// Feed rows (or dirty rows) above which one full recompute is cheaper.
pub const MAX_BACKLOG: usize = 20_000;

/// The alias kinds that are fingerprints in the ladder.
const PRINTS: [AliasKind; 3] = [
    AliasKind::GitRemote,
    AliasKind::HostId,
    AliasKind::FirstCommit,
];

/// After a complete sync: the full recompute for a reconcile (it is the
/// reconciliation of the proposals too), the incremental refresh otherwise.
pub async fn refresh_after_sync(
    store: &Store,
    settings: &Settings,
    reconcile: bool,
) -> Result<ProposalFigures> {
    if reconcile {
        refresh_proposals(store, settings).await
    } else {
        refresh_changed(store, settings).await
    }
}

/// Refresh the proposals of the containers changed since the last refresh
/// (full or incremental), and move the ladder's position past them. Runs
/// in the store's matching turn, so it reads what the round before it
/// wrote.
///
/// Then the people whose suggestions those changes can reach
/// ([`company_changes_reach`]) have them refreshed, each read by index,
/// instead of waiting for their own next sync (up to a day); after a
/// backlog too long to read, everyone with a private space is. A failed
/// refresh is logged; the next one of that person corrects it.
pub async fn refresh_changed(store: &Store, settings: &Settings) -> Result<ProposalFigures> {
    let (figures, people) = in_turn(store.matching_turn().await?, changed(store, settings)).await?;
    refresh_each(store, &people).await;
    Ok(figures)
}

/// The proposals refreshed, and the people whose suggestions the changes
/// can reach.
async fn changed(
    store: &Store,
    settings: &Settings,
) -> Result<(ProposalFigures, BTreeSet<String>)> {
    let (places_version, ladder_version) = store.matching_places_version().await?;
    if ladder_version.as_deref() != Some(places_version.as_str()) {
        // The import that changed the places refreshed everyone's
        // suggestions itself.
        tracing::info!("places changed since the last full recompute; recomputing all proposals");
        return Ok((recompute(store, settings).await?, BTreeSet::new()));
    }
    let backlog = store.matching_backlog(MAX_BACKLOG).await?;
    if backlog.overflow {
        tracing::info!(
            limit = MAX_BACKLOG,
            "matching backlog too long; recomputing all proposals and everyone's suggestions"
        );
        let figures = recompute(store, settings).await?;
        let everyone = store.people_with_private_spaces().await?;
        return Ok((figures, everyone.into_iter().collect()));
    }
    if backlog.changes.is_empty() && backlog.dirty.is_empty() {
        return Ok((ProposalFigures::default(), BTreeSet::new()));
    }
    let people = company_changes_reach(store, &backlog).await?;
    let containers = affected(store, &backlog).await?;
    let figures = if containers.is_empty() {
        ProposalFigures::default()
    } else {
        let places = place_index(store, &places_version).await?;
        let (spaces, mappings) = neighbourhood(store, &containers).await?;
        let only: HashSet<SpaceAddress> = containers.iter().cloned().collect();
        let candidates = propose_for(&places, &spaces, &mappings, settings, &only);
        let scope: Vec<String> = containers.iter().map(ToString::to_string).collect();
        store
            .sync_proposals_of(&scope, &to_rows(places.places(), &candidates))
            .await?
    };
    let ids: Vec<i64> = backlog.dirty.iter().map(|d| d.id).collect();
    store.matching_done(backlog.next, &ids).await?;
    tracing::info!(
        changes = backlog.changes.len(),
        dirty = ids.len(),
        containers = containers.len(),
        proposed = figures.proposed,
        superseded = figures.superseded,
        unchanged = figures.unchanged,
        people = people.len(),
        "mapping proposals refreshed for what changed"
    );
    Ok((figures, people))
}

/// The people whose suggestions the company side of `backlog` can reach
/// ([`people_reached`]): from the spaces it changed, with the alias values
/// the feed says they gained or lost. A person's own changes are left to
/// the refresh that follows their own sync. ADMIN decisions refresh the
/// people they reach as they are made
/// ([`crate::refresh_suggestions_after_decision`]).
pub async fn company_changes_reach(
    store: &Store,
    backlog: &MatchBacklog,
) -> Result<BTreeSet<String>> {
    let mut subjects: BTreeSet<String> = BTreeSet::new();
    let mut old: BTreeSet<(AliasKind, String)> = BTreeSet::new();
    for c in backlog.changes.iter().filter(|c| c.owner == Owner::Company) {
        if let Some((kind, value)) = alias_in(c) {
            old.insert((kind, value.to_owned()));
        }
        subjects.insert(c.address.to_string());
    }
    // Renames and moves (the feed does not say whose).
    subjects.extend(backlog.dirty.iter().map(|d| d.space_address.clone()));
    let subjects: Vec<String> = subjects.into_iter().collect();
    people_reached(store, &subjects, old).await
}

/// The alias a feed row says was added or retired.
fn alias_in(c: &ChangeRow) -> Option<(AliasKind, &str)> {
    let kind = c.detail["alias_kind"].as_str()?.parse().ok()?;
    Some((kind, c.detail["value"].as_str()?))
}

/// The place index of this process's last refresh, with the places
/// version it was built from (the token differs between databases too, so
/// one process serving several stores never mixes them up).
static PLACES: Mutex<Option<(String, Arc<PlaceIndex>)>> = Mutex::new(None);

/// The index of the places at `version`: kept while they do not change.
async fn place_index(store: &Store, version: &str) -> Result<Arc<PlaceIndex>> {
    {
        let cached = PLACES.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((v, ix)) = cached.as_ref()
            && v == version
        {
            return Ok(Arc::clone(ix));
        }
    }
    let ix = Arc::new(PlaceIndex::new(load_places(store).await?));
    // Kept only when no import ran while the places were read.
    if store.matching_places_version().await?.0 == version {
        *PLACES.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((version.to_owned(), Arc::clone(&ix)));
    }
    Ok(ix)
}

fn parse(s: &str) -> Option<SpaceAddress> {
    s.parse().ok()
}

fn is_container(a: &str) -> bool {
    parse(a).is_some_and(|a| a.kind().is_container())
}

/// Every container whose ladder input a change of the backlog touches.
pub async fn affected(store: &Store, backlog: &MatchBacklog) -> Result<BTreeSet<SpaceAddress>> {
    let mut changed: BTreeSet<String> = BTreeSet::new();
    let mut remapped: BTreeSet<String> = BTreeSet::new();
    // Alias values the feed says were added or retired: an old remote still
    // names the spaces that shared it.
    let mut old_values: BTreeSet<(AliasKind, String, String)> = BTreeSet::new();
    for c in &backlog.changes {
        let address = c.address.to_string();
        if matches!(
            c.kind,
            ChangeKind::MappingApproved | ChangeKind::MappingUndone
        ) {
            remapped.insert(address.clone());
        }
        if let Some((kind, value)) = alias_in(c) {
            old_values.insert((kind, value.to_owned(), address.clone()));
        }
        changed.insert(address);
    }
    let mut out: BTreeSet<String> = BTreeSet::new();
    for d in &backlog.dirty {
        changed.insert(d.space_address.clone());
        out.extend(d.old_container.clone());
    }
    let changed: Vec<String> = changed.into_iter().collect();
    // 1 and 3: the space itself when a container, and its container.
    out.extend(changed.iter().filter(|a| is_container(a)).cloned());
    for row in store.match_spaces_at(&changed, false).await? {
        out.extend(row.container);
    }
    // 4: spaces sharing a fingerprint (current or old) with a changed space,
    // or with a child of a container whose mapping changed (the child's
    // effective mapping changed with it).
    let remapped: Vec<String> = remapped.into_iter().collect();
    let mut subjects: BTreeSet<String> = changed.iter().cloned().collect();
    for kid in store.match_children_of(&remapped, false).await? {
        subjects.insert(kid.address);
    }
    let subjects: Vec<String> = subjects.into_iter().collect();
    let mut values: BTreeSet<(AliasKind, String, String)> = old_values;
    for a in store.match_aliases_of(&subjects).await? {
        if let Some(kind) = a.alias_kind() {
            values.insert((kind, a.value, a.space_address));
        }
    }
    for kind in PRINTS {
        let list: Vec<String> = values
            .iter()
            .filter(|(k, _, _)| *k == kind)
            .map(|(_, v, _)| v.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        for row in store.match_sharing(kind.as_str(), &list, false).await? {
            if is_container(&row.address) {
                out.insert(row.address);
            }
            out.extend(row.container);
        }
    }
    // 5: containers with a child named after a changed Jira project's key
    // (its current and its old keys).
    let prefixes: Vec<String> = values
        .iter()
        .filter(|(k, _, a)| {
            *k == AliasKind::Key && parse(a).is_some_and(|a| a.kind() == SpaceKind::JiraProject)
        })
        .map(|(_, v, _)| normalise_place_key(v))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    for row in store.match_named_after(&prefixes).await? {
        out.extend(row.container);
    }
    // 2: containers with the stable id of a space whose mapping changed.
    let stable: Vec<String> = remapped
        .iter()
        .filter_map(|a| parse(a))
        .map(|a| a.stable_id().to_owned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    for row in store.match_same_stable_id(&stable).await? {
        if is_container(&row.address) {
            out.insert(row.address);
        }
    }
    Ok(out
        .iter()
        .filter_map(|a| parse(a))
        .filter(|a| a.kind().is_container())
        .collect())
}

/// The ladder's input for `containers`: the containers, those of their
/// children that can give evidence, the spaces sharing their fingerprints, the mapped Jira projects their
/// children are named after, and the mappings of all of these, of their
/// containers and of the containers' stable ids.
pub async fn neighbourhood(
    store: &Store,
    containers: &BTreeSet<SpaceAddress>,
) -> Result<(
    Vec<crate::Space>,
    std::collections::HashMap<SpaceAddress, String>,
)> {
    let wanted: Vec<String> = containers.iter().map(ToString::to_string).collect();
    let mut rows = store.match_spaces_at(&wanted, true).await?;
    rows.extend(store.match_telling_children_of(&wanted).await?);
    let family: Vec<String> = rows.iter().map(|r| r.address.clone()).collect();
    let mut aliases = store.match_aliases_of(&family).await?;
    let known: HashSet<String> = family.iter().cloned().collect();
    let mut extra: BTreeSet<String> = BTreeSet::new();
    // Spaces sharing a fingerprint with the family.
    let mut by_kind: BTreeMap<AliasKind, BTreeSet<String>> = BTreeMap::new();
    for a in &aliases {
        if let Some(kind) = a.alias_kind().filter(|k| PRINTS.contains(k)) {
            by_kind.entry(kind).or_default().insert(a.value.clone());
        }
    }
    for (kind, values) in by_kind {
        let values: Vec<String> = values.into_iter().collect();
        for row in store.match_sharing(kind.as_str(), &values, true).await? {
            extra.insert(row.address);
        }
    }
    // Jira projects with a key that heads a child's name (keys are stored
    // lower-case; the ladder checks whether each is mapped).
    let keys: Vec<String> = rows
        .iter()
        .filter_map(|r| jira_prefix(&r.display_name))
        .map(|p| p.to_lowercase())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    for row in store.match_sharing("key", &keys, true).await? {
        if parse(&row.address).is_some_and(|a| a.kind() == SpaceKind::JiraProject) {
            extra.insert(row.address);
        }
    }
    let extra: Vec<String> = extra.into_iter().filter(|a| !known.contains(a)).collect();
    rows.extend(store.match_spaces_at(&extra, true).await?);
    aliases.extend(store.match_aliases_of(&extra).await?);
    // Mappings: of every space read, of their containers, and of the
    // containers' stable ids under any address.
    let mut mapped: BTreeSet<String> = BTreeSet::new();
    for r in &rows {
        mapped.insert(r.address.clone());
        mapped.extend(r.container.clone());
    }
    let mapped: Vec<String> = mapped.into_iter().collect();
    let mut mapping_rows = store.mappings_of(&mapped).await?;
    let stable: Vec<String> = containers
        .iter()
        .map(|c| c.stable_id().to_owned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    mapping_rows.extend(store.mappings_by_stable_id(&stable).await?);
    Ok((
        spaces_from_rows(rows, aliases),
        mappings_from_rows(mapping_rows),
    ))
}
