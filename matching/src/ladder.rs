//! The matching ladder, pure and in memory: every container space against
//! every place through hash indexes (normalised key, normalised name,
//! trigram postings, fingerprints, mappings), so the cost grows with spaces
//! plus places, never their product.

use std::collections::{BTreeMap, HashMap, HashSet};

use cmcp_domain::{AliasKind, SpaceAddress, SpaceKind};
use cmcp_registry::store::{normalise_place_key, normalise_place_name};

use crate::evidence::{Evidence, FingerprintKind, combined_confidence};
use crate::similarity::{jaro_winkler, trigrams};

#[derive(Debug, Clone)]
pub struct Place {
    pub id: String,
    pub name: String,
    pub key: Option<String>,
    pub retired: bool,
    pub aliases: Vec<PlaceAlias>,
}

#[derive(Debug, Clone)]
pub struct PlaceAlias {
    /// true: a key; false: a name.
    pub is_key: bool,
    pub raw: String,
    pub retired: bool,
}

#[derive(Debug, Clone)]
pub struct Space {
    pub address: SpaceAddress,
    pub name: String,
    pub container: Option<SpaceAddress>,
    /// Project key (Jira, Bitbucket), if the space has one.
    pub key: Option<String>,
    /// Git remotes, host ids and root (first) commits.
    pub fingerprints: Vec<(AliasKind, String)>,
}

#[derive(Debug, Clone)]
pub struct Settings {
    /// Jaro-Winkler similarity from which a name counts as similar.
    pub fuzzy_threshold: f64,
    /// Trigrams shared by more places than this are too common to find
    /// candidates with (keeps the fuzzy rung near linear).
    pub max_trigram_postings: usize,
    /// At most this many similar-name candidates per container (best first):
    /// weak evidence should not flood the screen.
    pub max_fuzzy_per_space: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            fuzzy_threshold: 0.9,
            max_trigram_postings: 1000,
            max_fuzzy_per_space: 3,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Place(String),
    Create(String),
}

#[derive(Debug, Clone)]
pub struct Candidate {
    pub container: SpaceAddress,
    pub space_name: String,
    pub target: Target,
    pub evidence: Vec<Evidence>,
    pub confidence: u8,
    /// The container has strong evidence for more than one place.
    pub conflict: bool,
}

/// The places as the ladder looks them up: by normalised key, by
/// normalised name, by trigram. Built once per set of places (the
/// incremental refresh keeps it while the places do not change).
#[derive(Debug)]
pub struct PlaceIndex {
    places: Vec<Place>,
    by_id: HashMap<String, usize>,
    by_key: HashMap<String, Vec<(usize, String, bool)>>,
    by_name: HashMap<String, Vec<(usize, String, bool)>>,
    by_trigram: HashMap<[char; 3], Vec<usize>>,
    place_trigram_count: Vec<usize>,
    place_norm_name: Vec<String>,
}

impl PlaceIndex {
    pub fn new(places: Vec<Place>) -> PlaceIndex {
        let mut ix = PlaceIndex {
            by_id: places
                .iter()
                .enumerate()
                .map(|(i, p)| (p.id.clone(), i))
                .collect(),
            by_key: HashMap::new(),
            by_name: HashMap::new(),
            by_trigram: HashMap::new(),
            place_trigram_count: vec![0; places.len()],
            place_norm_name: vec![String::new(); places.len()],
            places: Vec::new(),
        };
        for (i, p) in places.iter().enumerate() {
            if p.retired {
                continue;
            }
            if let Some(k) = p.key.as_deref().filter(|k| !k.trim().is_empty()) {
                ix.by_key
                    .entry(normalise_place_key(k))
                    .or_default()
                    .push((i, k.to_owned(), false));
            }
            let norm = normalise_place_name(&p.name);
            ix.by_name
                .entry(norm.clone())
                .or_default()
                .push((i, p.name.clone(), false));
            for a in &p.aliases {
                if a.is_key {
                    ix.by_key
                        .entry(normalise_place_key(&a.raw))
                        .or_default()
                        .push((i, a.raw.clone(), a.retired));
                } else if !a.retired {
                    ix.by_name
                        .entry(normalise_place_name(&a.raw))
                        .or_default()
                        .push((i, a.raw.clone(), true));
                }
            }
            let grams = trigrams(&norm);
            ix.place_trigram_count[i] = grams.len();
            for g in grams {
                ix.by_trigram.entry(g).or_default().push(i);
            }
            ix.place_norm_name[i] = norm;
        }
        ix.places = places;
        ix
    }

    pub fn places(&self) -> &[Place] {
        &self.places
    }
}

/// The Jira-style key a repo name starts with (`PAY-123-api` → `PAY`).
pub(crate) fn jira_prefix(name: &str) -> Option<String> {
    let (head, rest) = name.split_once('-')?;
    let ok = head.len() >= 2
        && head.len() <= 10
        && head.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && head.chars().all(|c| c.is_ascii_alphanumeric())
        && !rest.is_empty();
    ok.then(|| head.to_ascii_uppercase())
}

/// Run the ladder. Containers already mapped get nothing; every other
/// container gets one candidate per place it has evidence for, or a
/// "create" candidate when nothing strong matched.
pub fn propose(
    places: &[Place],
    spaces: &[Space],
    mappings: &HashMap<SpaceAddress, String>,
    settings: &Settings,
) -> Vec<Candidate> {
    ladder(
        &PlaceIndex::new(places.to_vec()),
        spaces,
        mappings,
        settings,
        None,
    )
}

/// [`propose`] for the `containers` only. `spaces` need not be the whole
/// registry: for each of the containers it must hold the container, its
/// children that can give evidence (any others change nothing), every
/// space sharing a fingerprint with them and every mapped Jira project
/// named by a child (`incremental::neighbourhood` reads exactly those),
/// and `mappings` the mappings of all of them, of their containers and of
/// the containers' stable ids.
pub fn propose_for(
    places: &PlaceIndex,
    spaces: &[Space],
    mappings: &HashMap<SpaceAddress, String>,
    settings: &Settings,
    containers: &HashSet<SpaceAddress>,
) -> Vec<Candidate> {
    ladder(places, spaces, mappings, settings, Some(containers))
}

fn ladder(
    ix: &PlaceIndex,
    spaces: &[Space],
    mappings: &HashMap<SpaceAddress, String>,
    settings: &Settings,
    only: Option<&HashSet<SpaceAddress>>,
) -> Vec<Candidate> {
    let places = ix.places();
    let place_ix = &ix.by_id;
    // Mapped stable ids, whatever the tenant (a project moved between
    // workspaces); every one of them, in address order, so that two mapped
    // copies are two candidates (a conflict when their places differ).
    let mut by_stable: HashMap<(SpaceKind, &str), Vec<(&SpaceAddress, &str)>> = HashMap::new();
    for (addr, place) in mappings {
        by_stable
            .entry((addr.kind(), addr.stable_id()))
            .or_default()
            .push((addr, place.as_str()));
    }
    for list in by_stable.values_mut() {
        list.sort_unstable();
    }
    let effective = |s: &Space| -> Option<&str> {
        mappings
            .get(&s.address)
            .or_else(|| s.container.as_ref().and_then(|c| mappings.get(c)))
            .map(String::as_str)
    };
    let mut children: HashMap<&SpaceAddress, Vec<&Space>> = HashMap::new();
    let mut by_fingerprint: HashMap<(AliasKind, &str), Vec<&Space>> = HashMap::new();
    // Every mapped Jira project of a key (two sites may share one).
    let mut jira_places: HashMap<String, Vec<(&SpaceAddress, &str)>> = HashMap::new();
    for s in spaces {
        if let Some(c) = &s.container {
            children.entry(c).or_default().push(s);
        }
        for (kind, value) in &s.fingerprints {
            by_fingerprint
                .entry((*kind, value.as_str()))
                .or_default()
                .push(s);
        }
        if s.address.kind() == SpaceKind::JiraProject
            && let (Some(key), Some(place)) = (&s.key, mappings.get(&s.address))
        {
            jira_places
                .entry(normalise_place_key(key))
                .or_default()
                .push((&s.address, place.as_str()));
        }
    }

    let mut out = Vec::new();
    let mut shared: HashMap<usize, usize> = HashMap::new();
    for list in jira_places.values_mut() {
        list.sort_unstable();
    }
    let wanted = |s: &&Space| {
        s.address.kind().is_container() && only.is_none_or(|set| set.contains(&s.address))
    };
    for c in spaces.iter().filter(wanted) {
        if mappings.contains_key(&c.address) {
            continue;
        }
        let mut found: BTreeMap<usize, Vec<Evidence>> = BTreeMap::new();
        let mut add = |place: usize, e: Evidence| {
            let list = found.entry(place).or_default();
            if !list.contains(&e) {
                list.push(e);
            }
        };
        // 1. The same stable id is mapped under another address.
        for (addr, place) in by_stable
            .get(&(c.address.kind(), c.address.stable_id()))
            .into_iter()
            .flatten()
        {
            if *addr != &c.address
                && let Some(&i) = place_ix.get(*place)
            {
                add(
                    i,
                    Evidence::MappedStableId {
                        mapped_space: addr.to_string(),
                    },
                );
            }
        }
        // 2. Key equal (also via a retired key).
        if let Some(key) = &c.key {
            for (i, place_key, retired) in ix
                .by_key
                .get(&normalise_place_key(key))
                .into_iter()
                .flatten()
            {
                add(
                    *i,
                    Evidence::KeyEqual {
                        key: key.to_uppercase(),
                        place_key: place_key.clone(),
                        retired: *retired,
                    },
                );
            }
        }
        // 3. Name equal after normalising.
        let norm = normalise_place_name(&c.name);
        for (i, place_name, via_alias) in ix.by_name.get(&norm).into_iter().flatten() {
            add(
                *i,
                Evidence::NameEqual {
                    name: c.name.clone(),
                    place_name: place_name.clone(),
                    via_alias: *via_alias,
                },
            );
        }
        // 4. Repos named after a mapped Jira project's key; 5. fingerprints
        // (remote, host id, or, weaker, root commit) shared with a mapped
        // space.
        let kids = children.get(&c.address).map(Vec::as_slice).unwrap_or(&[]);
        let mut prefixes: BTreeMap<String, &str> = BTreeMap::new();
        for kid in kids {
            if let Some(prefix) = jira_prefix(&kid.name) {
                let slot = prefixes.entry(prefix).or_insert(kid.name.as_str());
                if kid.name.as_str() < *slot {
                    *slot = kid.name.as_str();
                }
            }
        }
        for (prefix, example) in prefixes {
            for (jira, place) in jira_places.get(&prefix).into_iter().flatten() {
                if let Some(&i) = place_ix.get(*place) {
                    add(
                        i,
                        Evidence::JiraKey {
                            key: prefix.clone(),
                            jira_project: jira.to_string(),
                            example_repo: example.to_owned(),
                        },
                    );
                }
            }
        }
        for kid in kids.iter().copied().chain(std::iter::once(c)) {
            for (kind, value) in &kid.fingerprints {
                for other in by_fingerprint
                    .get(&(*kind, value.as_str()))
                    .into_iter()
                    .flatten()
                {
                    if other.address == kid.address || other.container.as_ref() == Some(&c.address)
                    {
                        continue;
                    }
                    if let Some(place) = effective(other)
                        && let Some(&i) = place_ix.get(place)
                    {
                        let mapped_space = other.address.to_string();
                        let what = match kind {
                            AliasKind::FirstCommit => {
                                add(
                                    i,
                                    Evidence::SameFirstCommit {
                                        sha: value.clone(),
                                        mapped_space,
                                    },
                                );
                                continue;
                            }
                            AliasKind::HostId => FingerprintKind::HostRepoId,
                            _ => FingerprintKind::GitRemote,
                        };
                        add(
                            i,
                            Evidence::SameFingerprint {
                                what,
                                value: value.clone(),
                                mapped_space,
                            },
                        );
                    }
                }
            }
        }
        // 6. Similar names, weak: candidates from shared trigrams only.
        if !norm.is_empty() {
            shared.clear();
            let mut usable = 0usize;
            for g in trigrams(&norm) {
                if let Some(list) = ix
                    .by_trigram
                    .get(&g)
                    .filter(|l| l.len() <= settings.max_trigram_postings)
                {
                    usable += 1;
                    for &i in list {
                        *shared.entry(i).or_default() += 1;
                    }
                }
            }
            // A candidate shares at least half of the name's usable
            // trigrams (too-common ones do not count).
            let mut similar: Vec<(f64, usize)> = Vec::new();
            for (&i, &n) in &shared {
                if found.contains_key(&i) || n * 2 < usable.min(ix.place_trigram_count[i]) {
                    continue;
                }
                let score = jaro_winkler(&norm, &ix.place_norm_name[i]);
                if score >= settings.fuzzy_threshold {
                    similar.push((score, i));
                }
            }
            similar.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            for (score, i) in similar.into_iter().take(settings.max_fuzzy_per_space) {
                let pct = u8::try_from((score * 100.0).round() as i64).unwrap_or(100);
                found.entry(i).or_default().push(Evidence::FuzzyName {
                    name: c.name.clone(),
                    place_name: places[i].name.clone(),
                    score_pct: pct,
                });
            }
        }
        let strong_places = found
            .values()
            .filter(|ev| ev.iter().any(|e| !e.is_weak()))
            .count();
        let conflict = strong_places > 1;
        for (i, mut evidence) in found {
            evidence.sort_by_key(|e| std::cmp::Reverse(e.confidence()));
            let strong = evidence.iter().any(|e| !e.is_weak());
            out.push(Candidate {
                container: c.address.clone(),
                space_name: c.name.clone(),
                target: Target::Place(places[i].id.clone()),
                confidence: combined_confidence(&evidence),
                evidence,
                conflict: conflict && strong,
            });
        }
        if strong_places == 0 {
            let evidence = vec![Evidence::NoMatch {
                name: c.name.clone(),
            }];
            out.push(Candidate {
                container: c.address.clone(),
                space_name: c.name.clone(),
                target: Target::Create(c.name.clone()),
                confidence: combined_confidence(&evidence),
                evidence,
                conflict: false,
            });
        }
    }
    out
}
