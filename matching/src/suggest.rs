//! A person's suggestions: each of their private spaces against the
//! company spaces that have an approved mapping (their own or their
//! container's), on the rungs that name the same code or the same work:
//! same remote, same host repo id, same first commit, or a mapped Jira key.
//! Names alone never suggest anything to a person: a private repo called
//! "api" says nothing about the company's "api".
//!
//! The round is the person's alone: it reads the company's mappings and
//! writes only that person's suggestions, never a mapping or a proposal
//! (DESIGN rule 6).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use cmcp_domain::{AliasKind, SpaceAddress, SpaceKind};
use cmcp_registry::store::normalise_place_key;
use cmcp_registry::{NewSuggestion, Store, SuggestionFigures, SuggestionKind};

use crate::Result;
use crate::evidence::{Evidence, FingerprintKind, combined_confidence, evidence_hash};
use crate::ladder::{Place, Space, jira_prefix};
use crate::refresh::{mappings_from_rows, place_of, spaces_from_rows};

/// One private space matching one place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match {
    pub space: SpaceAddress,
    pub space_name: String,
    pub place: String,
    pub evidence: Vec<Evidence>,
    pub confidence: u8,
}

/// Every (private space, place) pair with evidence, strongest evidence
/// first within a pair. `company` are the company's spaces, `mappings`
/// their approved mappings; retired places are left out.
pub fn suggest(
    places: &[Place],
    company: &[Space],
    mappings: &HashMap<SpaceAddress, String>,
    private: &[Space],
) -> Vec<Match> {
    let active: HashSet<&str> = places
        .iter()
        .filter(|p| !p.retired)
        .map(|p| p.id.as_str())
        .collect();
    let effective = |s: &Space| -> Option<&str> {
        mappings
            .get(&s.address)
            .or_else(|| s.container.as_ref().and_then(|c| mappings.get(c)))
            .map(String::as_str)
            .filter(|p| active.contains(p))
    };
    let mut by_print: HashMap<(AliasKind, &str), Vec<(&SpaceAddress, &str)>> = HashMap::new();
    let mut jira: HashMap<String, (&SpaceAddress, &str)> = HashMap::new();
    for s in company {
        let Some(place) = effective(s) else { continue };
        for (kind, value) in &s.fingerprints {
            by_print
                .entry((*kind, value.as_str()))
                .or_default()
                .push((&s.address, place));
        }
        if s.address.kind() == SpaceKind::JiraProject
            && let Some(key) = &s.key
        {
            jira.insert(normalise_place_key(key), (&s.address, place));
        }
    }
    let mut out = Vec::new();
    for p in private {
        let mut found: BTreeMap<&str, Vec<Evidence>> = BTreeMap::new();
        for (kind, value) in &p.fingerprints {
            for (mapped, place) in by_print.get(&(*kind, value.as_str())).into_iter().flatten() {
                let mapped_space = mapped.to_string();
                let e = match kind {
                    AliasKind::FirstCommit => Evidence::SameFirstCommit {
                        sha: value.clone(),
                        mapped_space,
                    },
                    AliasKind::HostId => Evidence::SameFingerprint {
                        what: FingerprintKind::HostRepoId,
                        value: value.clone(),
                        mapped_space,
                    },
                    _ => Evidence::SameFingerprint {
                        what: FingerprintKind::GitRemote,
                        value: value.clone(),
                        mapped_space,
                    },
                };
                let list = found.entry(place).or_default();
                if !list.contains(&e) {
                    list.push(e);
                }
            }
        }
        let keys = p
            .key
            .iter()
            .map(|k| normalise_place_key(k))
            .chain(jira_prefix(&p.name));
        for key in keys {
            if let Some((project, place)) = jira.get(&key) {
                let e = Evidence::JiraKey {
                    key: key.clone(),
                    jira_project: project.to_string(),
                    example_repo: p.name.clone(),
                };
                let list = found.entry(place).or_default();
                if !list.contains(&e) {
                    list.push(e);
                }
            }
        }
        for (place, mut evidence) in found {
            evidence.sort_by_key(|e| std::cmp::Reverse(e.confidence()));
            out.push(Match {
                space: p.address.clone(),
                space_name: p.name.clone(),
                place: place.to_owned(),
                confidence: combined_confidence(&evidence),
                evidence,
            });
        }
    }
    out
}

/// A match as `person` is offered it: a link to a place they belong to,
/// a request to join any other.
pub fn to_new_suggestion(
    m: &Match,
    member_of: &HashSet<String>,
    place_names: &HashMap<&str, &str>,
) -> NewSuggestion {
    let kind = if member_of.contains(&m.place) {
        SuggestionKind::Link
    } else {
        SuggestionKind::RequestToJoin
    };
    let label = place_names
        .get(m.place.as_str())
        .copied()
        .unwrap_or(m.place.as_str());
    NewSuggestion {
        space_address: m.space.clone(),
        place_id: m.place.clone(),
        kind,
        evidence: serde_json::to_value(&m.evidence).unwrap_or_default(),
        evidence_text: m.evidence.iter().map(|e| e.words(label)).collect(),
        confidence: i64::from(m.confidence),
        // The kind is part of what was suggested: a request to join that
        // becomes a link (the person joined) is new evidence.
        evidence_hash: evidence_hash(&format!("{kind}:{}", m.place), &m.evidence),
    }
}

/// A person's round as it is stored: [`suggest`]'s matches for their
/// `private` spaces, each worded with the place's name and a link where
/// they are `member_of` the place.
pub fn round_of(
    places: &[Place],
    company: &[Space],
    mappings: &HashMap<SpaceAddress, String>,
    private: &[Space],
    member_of: &HashSet<String>,
) -> Vec<NewSuggestion> {
    let names: HashMap<&str, &str> = places
        .iter()
        .map(|p| (p.id.as_str(), p.name.as_str()))
        .collect();
    suggest(places, company, mappings, private)
        .iter()
        .map(|m| to_new_suggestion(m, member_of, &names))
        .collect()
}

/// Recomputes and stores `person`'s suggestions (after a sync of one of
/// their connections). The company side is read by index from the
/// person's own spaces ([`input_near`]): the round costs what the person
/// has, not what the company has.
///
/// The round runs in the person's turn ([`Store::suggestion_turn`]), so a
/// round that waited for another reads what that one wrote.
pub async fn refresh_suggestions(store: &Store, person: &str) -> Result<SuggestionFigures> {
    crate::refresh::in_turn(
        store.suggestion_turn(person).await?,
        round_stored(store, person),
    )
    .await
}

async fn round_stored(store: &Store, person: &str) -> Result<SuggestionFigures> {
    let private = private_spaces(store, person).await?;
    let (places, company, mappings) = input_near(store, &private).await?;
    let member_of: HashSet<String> = store.places_of(person).await?.into_iter().collect();
    let round = round_of(&places, &company, &mappings, &private, &member_of);
    let figures = store.sync_suggestions(person, &round).await?;
    tracing::info!(
        private_spaces = private.len(),
        suggested = round.len(),
        opened = figures.opened,
        reopened = figures.reopened,
        withdrawn = figures.withdrawn,
        "suggestions refreshed"
    );
    Ok(figures)
}

/// What [`refresh_all_suggestions`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EveryoneRefreshed {
    /// People whose suggestions were refreshed.
    pub refreshed: u64,
    /// People whose refresh failed, each logged with its error. Nothing of
    /// theirs changed; their next sync (or the next import) refreshes
    /// them.
    pub failed: Vec<String>,
}

/// [`refresh_suggestions`] for everyone with a private space (after an
/// import of places changed who belongs where), one person at a time: the
/// whole costs what the people have, and memory stays that of one
/// person's round. (One read of the whole registry for everyone held the
/// organisation in memory at once, and each person's round then went
/// through every company space again.)
///
/// One person's failure does not stop the others (it stopped every person
/// after them, import after import, while it lasted); it is logged and
/// named in the result. An error is only the list of people not read.
pub async fn refresh_all_suggestions(store: &Store) -> Result<EveryoneRefreshed> {
    let people: BTreeSet<String> = store
        .people_with_private_spaces()
        .await?
        .into_iter()
        .collect();
    let failed = refresh_each(store, &people).await;
    Ok(EveryoneRefreshed {
        refreshed: (people.len() - failed.len()) as u64,
        failed,
    })
}

/// After ADMIN decisions changed the mappings of `containers`, refresh the
/// suggestions of everyone those mappings can reach, without waiting for
/// their next sync: the people with a space sharing a fingerprint or a key
/// with a container or one of its children, or named after one of their
/// keys (a person's rungs read backwards; a superset). Returns the people
/// reached (a failed refresh of one is logged, as in [`refresh_each`]).
pub async fn refresh_suggestions_after_decision(
    store: &Store,
    containers: &[String],
) -> Result<BTreeSet<String>> {
    let mut subjects: BTreeSet<String> = containers.iter().cloned().collect();
    for kid in store.match_children_of(containers, false).await? {
        subjects.insert(kid.address);
    }
    let subjects: Vec<String> = subjects.into_iter().collect();
    let people = people_reached(store, &subjects, BTreeSet::new()).await?;
    refresh_each(store, &people).await;
    Ok(people)
}

/// [`refresh_suggestions`] for each of `people`: a person's failure is
/// logged and the others go on; returns those that failed. That person's
/// next round corrects theirs.
pub(crate) async fn refresh_each(store: &Store, people: &BTreeSet<String>) -> Vec<String> {
    let mut failed = Vec::new();
    for person in people {
        if let Err(error) = refresh_suggestions(store, person).await {
            tracing::warn!(%error, %person, "could not refresh a person's suggestions; the others go on");
            failed.push(person.clone());
        }
    }
    failed
}

/// The people whose suggestions a change of the company spaces at
/// `subjects` can reach, given the alias values those spaces have and
/// `old` ones they may have had (a retired remote still names the private
/// repos that shared it): the owners of a space sharing a value
/// with them, or named after one of their keys (a person's rungs read
/// backwards; a superset), and whoever has a suggestion on one of them (a
/// private space since taken over by a company connection).
pub async fn people_reached(
    store: &Store,
    subjects: &[String],
    old: BTreeSet<(AliasKind, String)>,
) -> Result<BTreeSet<String>> {
    let mut values: BTreeMap<AliasKind, BTreeSet<String>> = BTreeMap::new();
    for (kind, value) in old {
        values.entry(kind).or_default().insert(value);
    }
    for a in store.match_aliases_of(subjects).await? {
        if let Some(kind) = a.alias_kind() {
            values.entry(kind).or_default().insert(a.value);
        }
    }
    let prefixes: Vec<String> = values
        .get(&AliasKind::Key)
        .into_iter()
        .flatten()
        .map(|key| normalise_place_key(key))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut people: BTreeSet<String> = BTreeSet::new();
    for (kind, values) in values {
        let values: Vec<String> = values.into_iter().collect();
        people.extend(store.people_sharing(kind.as_str(), &values).await?);
    }
    people.extend(store.people_named_after(&prefixes).await?);
    people.extend(store.people_suggested_for(subjects).await?);
    Ok(people)
}

/// `person`'s spaces as the rungs compare them.
pub async fn private_spaces(store: &Store, person: &str) -> Result<Vec<Space>> {
    Ok(spaces_from_rows(
        store.person_match_spaces(person).await?,
        store.person_match_aliases(person).await?,
    ))
}

/// What a person's round can reach from `private`, read by index, as
/// [`crate::load_input`] gives it for the whole registry: the company spaces
/// sharing a fingerprint with one of them, the Jira projects holding a key
/// one of them carries or is named after (with all their keys and
/// fingerprints), the approved mappings of these spaces and of their
/// containers, and the places those mappings name. [`suggest`] looks at
/// nothing else (every rung starts from a private space's fingerprint or
/// key, and a place counts only through a mapping), so on this it finds
/// what it finds on the whole registry; what is read here beyond that (a
/// space whose mapping is missing, a key of the wrong kind of space) it
/// leaves out as it would there. Places come without their aliases, which
/// no rung of a person's looks at.
pub async fn input_near(
    store: &Store,
    private: &[Space],
) -> Result<(Vec<Place>, Vec<Space>, HashMap<SpaceAddress, String>)> {
    let mut prints: BTreeMap<AliasKind, BTreeSet<String>> = BTreeMap::new();
    let mut keys: BTreeSet<String> = BTreeSet::new();
    for p in private {
        for (kind, value) in &p.fingerprints {
            prints.entry(*kind).or_default().insert(value.clone());
        }
        // Looked up as a key alias is stored (the rung compares them
        // normalised as places' keys).
        let carried = p.key.iter().map(|k| normalise_place_key(k));
        for key in carried.chain(jira_prefix(&p.name)) {
            keys.extend(AliasKind::Key.normalise(&key));
        }
    }
    let mut near: BTreeSet<String> = BTreeSet::new();
    for (kind, values) in prints {
        let values: Vec<String> = values.into_iter().collect();
        for row in store.match_sharing(kind.as_str(), &values, true).await? {
            near.insert(row.address);
        }
    }
    let keys: Vec<String> = keys.into_iter().collect();
    for row in store
        .match_sharing(AliasKind::Key.as_str(), &keys, true)
        .await?
    {
        near.insert(row.address);
    }
    let near: Vec<String> = near.into_iter().collect();
    let rows = store.match_spaces_at(&near, true).await?;
    let aliases = store.match_aliases_of(&near).await?;
    let mut mapped: BTreeSet<String> = BTreeSet::new();
    for r in &rows {
        mapped.insert(r.address.clone());
        mapped.extend(r.container.clone());
    }
    let mapped: Vec<String> = mapped.into_iter().collect();
    let mappings = mappings_from_rows(store.mappings_of(&mapped).await?);
    let named: Vec<String> = mappings
        .values()
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let places = store
        .places_at(&named)
        .await?
        .into_iter()
        .map(|p| place_of(p, Vec::new()))
        .collect();
    Ok((places, spaces_from_rows(rows, aliases), mappings))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(kind: SpaceKind, id: &str) -> SpaceAddress {
        SpaceAddress::new(kind, "github.com", id).unwrap()
    }

    fn space(a: SpaceAddress, name: &str, container: Option<SpaceAddress>) -> Space {
        Space {
            address: a,
            name: name.to_owned(),
            container,
            key: None,
            fingerprints: Vec::new(),
        }
    }

    fn place(id: &str, retired: bool) -> Place {
        Place {
            id: id.to_owned(),
            name: id.to_uppercase(),
            key: None,
            retired,
            aliases: Vec::new(),
        }
    }

    #[test]
    fn a_shared_root_commit_through_the_container_mapping_suggests_its_place() {
        let org = addr(SpaceKind::GithubOrg, "1");
        let mut api = space(addr(SpaceKind::GithubRepo, "10"), "api", Some(org.clone()));
        api.fingerprints
            .push((AliasKind::FirstCommit, "abc".into()));
        let mut fork = space(addr(SpaceKind::GithubRepo, "20"), "api-fork", None);
        fork.fingerprints
            .push((AliasKind::FirstCommit, "abc".into()));
        let notes = space(addr(SpaceKind::GithubRepo, "21"), "api", None);
        let mappings = HashMap::from([(org.clone(), "payments".to_owned())]);
        let places = [place("payments", false)];
        let got = suggest(&places, &[api], &mappings, &[fork.clone(), notes]);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(
            (got[0].space.clone(), got[0].place.as_str()),
            (fork.address, "payments")
        );
        assert!(matches!(
            got[0].evidence[0],
            Evidence::SameFirstCommit { .. }
        ));
        // A retired place suggests nothing.
        let retired = [place("payments", true)];
        assert!(suggest(&retired, &[], &mappings, &[]).is_empty());
    }

    #[test]
    fn a_mapped_jira_key_in_the_name_suggests_its_place() {
        let mut jira = space(
            SpaceAddress::new(SpaceKind::JiraProject, "acme.atlassian.net", "10001").unwrap(),
            "Payments",
            None,
        );
        jira.key = Some("PAY".into());
        let mappings = HashMap::from([(jira.address.clone(), "payments".to_owned())]);
        let mine = space(addr(SpaceKind::GithubRepo, "30"), "PAY-42-spike", None);
        let got = suggest(&[place("payments", false)], &[jira], &mappings, &[mine]);
        assert_eq!(got.len(), 1);
        assert!(matches!(&got[0].evidence[0], Evidence::JiraKey { key, .. } if key == "PAY"));
        let member: HashSet<String> = ["payments".to_owned()].into();
        let names = HashMap::new();
        assert_eq!(
            to_new_suggestion(&got[0], &member, &names).kind,
            SuggestionKind::Link
        );
        assert_eq!(
            to_new_suggestion(&got[0], &HashSet::new(), &names).kind,
            SuggestionKind::RequestToJoin
        );
    }
}
