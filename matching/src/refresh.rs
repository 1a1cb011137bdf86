//! Matching against the registry: load places, spaces, their keys and
//! fingerprints and the approved mappings, run the ladder, and store the
//! round (`Store::sync_proposals` keeps only what changed). Called after
//! every complete sync and every places import.

use std::collections::HashMap;

use cmcp_domain::{AliasKind, SpaceAddress};
use cmcp_registry::{
    MatchAliasRow, MatchSpaceRow, NewProposal, PlaceAliasKind, ProposalFigures, ProposalTarget,
    Store,
};

use crate::Result;
use crate::evidence::evidence_hash;
use crate::ladder::{Candidate, Place, PlaceAlias, Settings, Space, Target, propose};

/// Everything the ladder needs, read from the store.
pub async fn load_input(
    store: &Store,
) -> Result<(Vec<Place>, Vec<Space>, HashMap<SpaceAddress, String>)> {
    let mut aliases: HashMap<String, Vec<PlaceAlias>> = HashMap::new();
    for a in store.list_place_aliases().await? {
        aliases.entry(a.place_id).or_default().push(PlaceAlias {
            is_key: a.kind == PlaceAliasKind::Key,
            raw: a.raw,
            retired: a.valid_to.is_some(),
        });
    }
    let places: Vec<Place> = store
        .list_places()
        .await?
        .into_iter()
        .map(|p| Place {
            retired: p.is_retired(),
            aliases: aliases.remove(&p.id).unwrap_or_default(),
            id: p.id,
            name: p.name,
            key: p.key,
        })
        .collect();
    let spaces = spaces_from_rows(store.match_spaces().await?, store.match_aliases().await?);
    let mut mappings = HashMap::new();
    for m in store.list_mappings().await? {
        if let Ok(address) = m.space_address.parse::<SpaceAddress>() {
            mappings.insert(address, m.place_id);
        }
    }
    Ok((places, spaces, mappings))
}

/// Spaces as the ladder reads them: each row with its key and
/// fingerprints (remotes, host ids, root commits) from `aliases`.
pub fn spaces_from_rows(rows: Vec<MatchSpaceRow>, aliases: Vec<MatchAliasRow>) -> Vec<Space> {
    let mut keys: HashMap<String, String> = HashMap::new();
    let mut prints: HashMap<String, Vec<(AliasKind, String)>> = HashMap::new();
    for a in aliases {
        match a.alias_kind() {
            Some(AliasKind::Key) => {
                keys.insert(a.space_address, a.value);
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
    let mut spaces = Vec::new();
    for s in rows {
        let Ok(address) = s.address.parse::<SpaceAddress>() else {
            tracing::warn!(address = %s.address, "space address does not parse; skipped by matching");
            continue;
        };
        spaces.push(Space {
            container: s.container.as_deref().and_then(|c| c.parse().ok()),
            key: keys.remove(&s.address),
            fingerprints: prints.remove(&s.address).unwrap_or_default(),
            name: s.display_name,
            address,
        });
    }
    spaces
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

/// Recompute and store proposals for the whole registry.
pub async fn refresh_proposals(store: &Store, settings: &Settings) -> Result<ProposalFigures> {
    let (places, spaces, mappings) = load_input(store).await?;
    let candidates = propose(&places, &spaces, &mappings, settings);
    let names: HashMap<&str, &str> = places
        .iter()
        .map(|p| (p.id.as_str(), p.name.as_str()))
        .collect();
    let rows: Vec<NewProposal> = candidates
        .iter()
        .map(|c| to_new_proposal(c, &names))
        .collect();
    let figures = store.sync_proposals(&rows).await?;
    tracing::info!(
        containers = spaces
            .iter()
            .filter(|s| s.address.kind().is_container())
            .count(),
        places = places.len(),
        proposed = figures.proposed,
        superseded = figures.superseded,
        unchanged = figures.unchanged,
        "mapping proposals refreshed"
    );
    Ok(figures)
}
