//! Why a container should map to a place: typed evidence, its confidence
//! and its rendering in words for the ADMIN. Strongest rungs first.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

cmcp_domain::string_enum! {
    /// What two spaces share in [`Evidence::SameFingerprint`].
    pub enum FingerprintKind: "fingerprint kind" {
        /// A clone URL, in any spelling.
        GitRemote = "git remote",
        /// The platform's second, opaque id of the repo (GitHub `node_id`).
        HostRepoId = "host repo id",
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Evidence {
    /// The same stable id (under another address) is already mapped.
    MappedStableId { mapped_space: String },
    /// The container's key equals a key of the place (maybe a retired one).
    KeyEqual {
        key: String,
        place_key: String,
        retired: bool,
    },
    /// Names equal after normalising case, spaces, dashes and underscores.
    NameEqual {
        name: String,
        place_name: String,
        via_alias: bool,
    },
    /// Repos in the container are named after a Jira key whose project is
    /// mapped to the place.
    JiraKey {
        key: String,
        jira_project: String,
        example_repo: String,
    },
    /// A repo of the container shares a remote or host id with a space that
    /// is already mapped (directly or through its container).
    SameFingerprint {
        what: FingerprintKind,
        value: String,
        mapped_space: String,
    },
    /// A repo of the container has the same root (first) commit as a space
    /// that is already mapped (directly or through its container).
    SameFirstCommit {
        /// The full commit id; the words print it short.
        sha: String,
        mapped_space: String,
    },
    /// Similar names: weak evidence only.
    FuzzyName {
        name: String,
        place_name: String,
        score_pct: u8,
    },
    /// Nothing matched: propose creating a place.
    NoMatch { name: String },
}

impl Evidence {
    pub fn confidence(&self) -> u8 {
        match self {
            Evidence::MappedStableId { .. } => 98,
            Evidence::KeyEqual { retired: false, .. } => 95,
            Evidence::KeyEqual { retired: true, .. } => 85,
            Evidence::SameFingerprint { .. } => 90,
            Evidence::NameEqual {
                via_alias: false, ..
            } => 80,
            Evidence::NameEqual {
                via_alias: true, ..
            } => 75,
            Evidence::JiraKey { .. } => 75,
            // Weaker than a shared remote or host id (90), which name the very
            // same repo: forks and mirrors keep the root commit, so a shared
            // one says "same history", and a fork often lives in another
            // team's project (or a contractor's workspace). Still well above a
            // similar name (at most 45) and "create" (50): a root commit is
            // not shared by chance, so it is worth the ADMIN's look; below
            // an equal name (75) so a direct naming match outranks it.
            Evidence::SameFirstCommit { .. } => 60,
            Evidence::FuzzyName { score_pct, .. } => (*score_pct / 2).min(45),
            Evidence::NoMatch { .. } => 50,
        }
    }

    /// Weak evidence never makes a conflict and never outranks a strong one.
    pub fn is_weak(&self) -> bool {
        matches!(self, Evidence::FuzzyName { .. } | Evidence::NoMatch { .. })
    }

    /// One line for the ADMIN, naming the place as `place`.
    pub fn words(&self, place: &str) -> String {
        match self {
            Evidence::MappedStableId { mapped_space } => {
                format!("same stable id as {mapped_space}, already mapped to place {place}")
            }
            Evidence::KeyEqual {
                key,
                place_key,
                retired,
            } => {
                if *retired {
                    format!("key {key} equals the retired key {place_key} of place {place}")
                } else {
                    format!("key {key} equals place key {place_key}")
                }
            }
            Evidence::NameEqual {
                name,
                place_name,
                via_alias,
            } => {
                let of = if *via_alias {
                    "an alias of place"
                } else {
                    "place name"
                };
                format!("name \"{name}\" equals {of} \"{place_name}\" after normalising")
            }
            Evidence::JiraKey {
                key,
                jira_project,
                example_repo,
            } => format!(
                "repos named {key}-… (e.g. {example_repo}) and Jira project {jira_project} is mapped to place {place}"
            ),
            Evidence::SameFingerprint {
                what,
                value,
                mapped_space,
            } => format!("same {what} {value} as {mapped_space}, which is mapped to place {place}"),
            Evidence::SameFirstCommit { sha, mapped_space } => {
                let short = sha.get(..SHORT_SHA).unwrap_or(sha);
                format!(
                    "same first commit {short} as {mapped_space}, which is mapped to place {place}"
                )
            }
            Evidence::FuzzyName {
                name,
                place_name,
                score_pct,
            } => format!(
                "name \"{name}\" is similar to place name \"{place_name}\" ({score_pct}%), weak"
            ),
            Evidence::NoMatch { name } => {
                format!("no place matches; create cMCP project \"{name}\"")
            }
        }
    }
}

/// Hex digits of a commit id printed in words (git's own default).
const SHORT_SHA: usize = 7;

/// Confidence of a list: the strongest item, plus a little for each further
/// strong item, below 100 (certainty is the ADMIN's to give).
pub fn combined_confidence(evidence: &[Evidence]) -> u8 {
    let best = evidence.iter().map(Evidence::confidence).max().unwrap_or(0);
    let more = evidence
        .iter()
        .filter(|e| !e.is_weak())
        .count()
        .saturating_sub(1);
    best.saturating_add(u8::try_from(more * 2).unwrap_or(u8::MAX))
        .min(99)
}

/// A stable hash of a target and its evidence, independent of order.
pub fn evidence_hash(target: &str, evidence: &[Evidence]) -> String {
    let mut parts: Vec<String> = evidence
        .iter()
        .map(|e| serde_json::to_string(e).unwrap_or_default())
        .collect();
    parts.sort();
    let mut h = Sha256::new();
    h.update(target.as_bytes());
    for p in parts {
        h.update([0u8]);
        h.update(p.as_bytes());
    }
    hex::encode(h.finalize())
}
