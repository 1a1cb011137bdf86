//! Matching against the registry, whole: every container, a page at a
//! time, through the ladder, each round stored for its page
//! (`Store::sync_proposals_of` keeps only what changed). This is the
//! reconciliation path (the nightly reconcile, a places import); after an
//! ordinary sync [`crate::incremental`] refreshes only what changed.
//! [`load_input`] reads the whole registry at once, for the in-memory
//! ladder ([`crate::propose`]) that the tests and benches compare with.

use std::collections::{BTreeSet, HashMap, HashSet};

use cmcp_domain::{AliasKind, SpaceAddress};
use cmcp_registry::{
    MappingRow, MatchAliasRow, MatchSpaceRow, MatchingTurn, NewProposal, PlaceAliasKind, PlaceRow,
    ProposalFigures, ProposalTarget, Store,
};

use crate::Result;
use crate::evidence::evidence_hash;
use crate::incremental::neighbourhood;
use crate::ladder::{
    Candidate, Place, PlaceAlias, PlaceIndex, Settings, Space, Target, propose_for,
};

/// Every place with its aliases (the ladder's name and fuzzy rungs index
/// them all).
pub async fn load_places(store: &Store) -> Result<Vec<Place>> {
    let mut aliases: HashMap<String, Vec<PlaceAlias>> = HashMap::new();
    for a in store.list_place_aliases().await? {
        aliases.entry(a.place_id).or_default().push(PlaceAlias {
            is_key: a.kind == PlaceAliasKind::Key,
            raw: a.raw,
            retired: a.valid_to.is_some(),
        });
    }
    Ok(store
        .list_places()
        .await?
        .into_iter()
        .map(|p| {
            let of = aliases.remove(&p.id).unwrap_or_default();
            place_of(p, of)
        })
        .collect())
}

/// A place as the ladder sees it, from its row and its aliases.
pub fn place_of(row: PlaceRow, aliases: Vec<PlaceAlias>) -> Place {
    Place {
        retired: row.is_retired(),
        aliases,
        id: row.id,
        name: row.name,
        key: row.key,
    }
}

/// Spaces as the ladder sees them, from their rows and their active keys
/// and fingerprints, in address order. A space with two active keys takes
/// the smallest, so every reading of the same rows gives the same input.
pub fn spaces_from_rows(rows: Vec<MatchSpaceRow>, aliases: Vec<MatchAliasRow>) -> Vec<Space> {
    let mut keys: HashMap<String, String> = HashMap::new();
    let mut prints: HashMap<String, Vec<(AliasKind, String)>> = HashMap::new();
    for a in aliases {
        match a.alias_kind() {
            Some(AliasKind::Key) => {
                let slot = keys
                    .entry(a.space_address)
                    .or_insert_with(|| a.value.clone());
                if a.value < *slot {
                    *slot = a.value;
                }
            }
            Some(kind @ (AliasKind::GitRemote | AliasKind::HostId | AliasKind::FirstCommit)) => {
                prints
                    .entry(a.space_address)
                    .or_default()
                    .push((kind, a.value));
            }
            _ => {}
        }
    }
    let mut spaces = Vec::with_capacity(rows.len());
    for s in rows {
        let Ok(address) = s.address.parse::<SpaceAddress>() else {
            tracing::warn!(address = %s.address, "space address does not parse; skipped by matching");
            continue;
        };
        let mut fingerprints = prints.remove(&s.address).unwrap_or_default();
        fingerprints.sort_unstable();
        fingerprints.dedup();
        spaces.push(Space {
            container: s.container.as_deref().and_then(|c| c.parse().ok()),
            key: keys.remove(&s.address),
            fingerprints,
            name: s.display_name,
            address,
        });
    }
    spaces.sort_unstable_by(|a, b| a.address.cmp(&b.address));
    spaces.dedup_by(|a, b| a.address == b.address);
    spaces
}

/// Mapping rows as the ladder's map.
pub fn mappings_from_rows(rows: Vec<MappingRow>) -> HashMap<SpaceAddress, String> {
    rows.into_iter()
        .filter_map(|m| Some((m.space_address.parse().ok()?, m.place_id)))
        .collect()
}

/// Everything the ladder needs, read from the store.
pub async fn load_input(
    store: &Store,
) -> Result<(Vec<Place>, Vec<Space>, HashMap<SpaceAddress, String>)> {
    let places = load_places(store).await?;
    let spaces = spaces_from_rows(store.match_spaces().await?, store.match_aliases().await?);
    let mappings = mappings_from_rows(store.list_mappings().await?);
    Ok((places, spaces, mappings))
}

/// A ladder candidate as a storable proposal, with words and hash.
pub fn to_new_proposal(c: &Candidate, place_names: &HashMap<&str, &str>) -> NewProposal {
    let target = match &c.target {
        Target::Place(id) => ProposalTarget::Place(id.clone()),
        Target::Create(name) => ProposalTarget::Create(name.clone()),
    };
    let label = match &c.target {
        Target::Place(id) => place_names.get(id.as_str()).copied().unwrap_or(id.as_str()),
        Target::Create(name) => name.as_str(),
    };
    NewProposal {
        container: c.container.clone(),
        space_name: c.space_name.clone(),
        evidence: serde_json::to_value(&c.evidence).unwrap_or_default(),
        evidence_text: c.evidence.iter().map(|e| e.words(label)).collect(),
        confidence: i64::from(c.confidence),
        conflict: c.conflict,
        evidence_hash: evidence_hash(&target.as_db(), &c.evidence),
        target,
    }
}

/// Candidates as storable proposals.
pub fn to_rows(places: &[Place], candidates: &[Candidate]) -> Vec<NewProposal> {
    let names: HashMap<&str, &str> = places
        .iter()
        .map(|p| (p.id.as_str(), p.name.as_str()))
        .collect();
    candidates
        .iter()
        .map(|c| to_new_proposal(c, &names))
        .collect()
}

/// Containers per page of the full recompute.
const PAGE: usize = 500;

/// Recompute and store proposals for the whole registry, a page of
/// containers at a time: each page reads its neighbourhood by index (as the
/// incremental refresh does), runs the ladder and stores its round, so
/// memory stays that of one page whatever the size of the organisation.
/// Open proposals of containers matching no longer compares are superseded
/// last. The feed's head and the dirty rows are read first, so what changes
/// while the pages run is looked at again by the next incremental refresh.
/// Runs in the store's matching turn ([`in_turn`]).
pub async fn refresh_proposals(store: &Store, settings: &Settings) -> Result<ProposalFigures> {
    in_turn(store.matching_turn().await?, recompute(store, settings)).await
}

/// Run one round in `turn` (the store's matching turn, or a person's
/// suggestion turn): rounds of every process take turns
/// ([`cmcp_registry::MatchingTurn`] says why), and the turn is given back
/// whether the round succeeded or not.
pub(crate) async fn in_turn<T>(
    turn: MatchingTurn,
    round: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    let out = round.await;
    let ended = turn.end().await;
    let out = out?;
    ended?;
    Ok(out)
}

/// [`refresh_proposals`] inside a turn already taken.
pub(crate) async fn recompute(store: &Store, settings: &Settings) -> Result<ProposalFigures> {
    let head = store.change_head().await?;
    let dirty = store.matching_dirty_ids().await?;
    let (places_version, _) = store.matching_places_version().await?;
    let places = PlaceIndex::new(load_places(store).await?);
    let mut figures = ProposalFigures::default();
    let mut containers = 0usize;
    let mut after: Option<String> = None;
    loop {
        let page = store.match_containers_after(after.as_deref(), PAGE).await?;
        let Some(last) = page.last().cloned() else {
            break;
        };
        let wanted: BTreeSet<SpaceAddress> = page.iter().filter_map(|a| a.parse().ok()).collect();
        let (spaces, mappings) = neighbourhood(store, &wanted).await?;
        let only: HashSet<SpaceAddress> = wanted.into_iter().collect();
        let candidates = propose_for(&places, &spaces, &mappings, settings, &only);
        let round = store
            .sync_proposals_of(&page, &to_rows(places.places(), &candidates))
            .await?;
        figures.proposed += round.proposed;
        figures.superseded += round.superseded;
        figures.unchanged += round.unchanged;
        containers += page.len();
        after = Some(last);
    }
    figures.superseded += store.supersede_proposals_of_ineligible().await?;
    store.analyze_proposals().await?;
    store.matching_done(head, &dirty).await?;
    store.matching_places_done(&places_version).await?;
    tracing::info!(
        containers,
        places = places.places().len(),
        proposed = figures.proposed,
        superseded = figures.superseded,
        unchanged = figures.unchanged,
        "mapping proposals refreshed"
    );
    Ok(figures)
}
