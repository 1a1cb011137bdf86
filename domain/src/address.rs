//! The space address: `space:<kind>:<tenant or host>/<stable id>`.
//!
//! A space is identified by the platform's stable id inside its tenant, never
//! by a name, slug, key or path (those are aliases and change). The printed
//! form is canonical: kind and tenant are lower-case, and stable ids are
//! lower-case for every platform whose ids are case-insensitive (GitHub's
//! numeric ids, Bitbucket's uuids without braces, Jira's numeric project
//! ids). Google Drive ids are opaque, case-sensitive tokens: lower-casing them
//! could merge two different folders, so they are kept exactly as Drive sends
//! them. Parsing a printed address gives back the same value, always.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{DomainError, Result};

crate::string_enum! {
    /// The platforms the fleet reads. Adding one means a connector, a
    /// simulator and its kinds here; `Platform::ALL` is what error messages
    /// list.
    pub enum Platform: "platform" {
        Github = "github",
        Bitbucket = "bitbucket",
        Jira = "jira",
        Drive = "drive",
    }
}

crate::string_enum! {
    /// What a space is. Containers (orgs, workspaces, projects, shared
    /// drives) and the things inside them (repos, folders) are all spaces.
    pub enum SpaceKind: "space kind" {
        GithubOrg = "github-org",
        GithubRepo = "github-repo",
        BitbucketWorkspace = "bitbucket-workspace",
        BitbucketProject = "bitbucket-project",
        BitbucketRepo = "bitbucket-repo",
        JiraProject = "jira-project",
        DriveSharedDrive = "drive-shared-drive",
        DriveFolder = "drive-folder",
    }
}

impl SpaceKind {
    pub fn platform(self) -> Platform {
        match self {
            SpaceKind::GithubOrg | SpaceKind::GithubRepo => Platform::Github,
            SpaceKind::BitbucketWorkspace
            | SpaceKind::BitbucketProject
            | SpaceKind::BitbucketRepo => Platform::Bitbucket,
            SpaceKind::JiraProject => Platform::Jira,
            SpaceKind::DriveSharedDrive | SpaceKind::DriveFolder => Platform::Drive,
        }
    }

    /// Whether the kind groups other spaces (the thing a mapping proposal is
    /// made for) rather than being a leaf that follows its container.
    pub fn is_container(self) -> bool {
        !matches!(
            self,
            SpaceKind::GithubRepo | SpaceKind::BitbucketRepo | SpaceKind::DriveFolder
        )
    }

    /// Drive ids are case-sensitive; every other platform's ids are not.
    fn case_sensitive_id(self) -> bool {
        self.platform() == Platform::Drive
    }

    /// Canonical form of a stable id of this kind: Bitbucket uuids lose their
    /// braces, case-insensitive ids are lower-cased, surrounding spaces go.
    pub fn canonical_id(self, raw: &str) -> String {
        let trimmed = raw.trim();
        let unbraced = if self.platform() == Platform::Bitbucket {
            trimmed.trim_start_matches('{').trim_end_matches('}')
        } else {
            trimmed
        };
        if self.case_sensitive_id() {
            unbraced.to_owned()
        } else {
            unbraced.to_ascii_lowercase()
        }
    }
}

/// The identity of a space. Construct with [`SpaceAddress::new`], which
/// canonicalises; the fields are private so no un-canonical value exists.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpaceAddress {
    kind: SpaceKind,
    tenant: String,
    stable_id: String,
}

impl SpaceAddress {
    /// `tenant` is a host (`github.com`, a GHES host) or a tenant id (a
    /// Bitbucket workspace uuid, a Jira cloudId, a Google Workspace domain).
    pub fn new(kind: SpaceKind, tenant: &str, stable_id: &str) -> Result<Self> {
        let tenant = canonical_tenant(tenant);
        let stable_id = kind.canonical_id(stable_id);
        validate_part(&tenant, "tenant")?;
        validate_part(&stable_id, "stable id")?;
        Ok(SpaceAddress {
            kind,
            tenant,
            stable_id,
        })
    }

    pub fn kind(&self) -> SpaceKind {
        self.kind
    }

    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    pub fn stable_id(&self) -> &str {
        &self.stable_id
    }

    pub fn platform(&self) -> Platform {
        self.kind.platform()
    }
}

fn canonical_tenant(raw: &str) -> String {
    let t = raw.trim().trim_start_matches('{').trim_end_matches('}');
    t.to_ascii_lowercase()
}

fn validate_part(part: &str, what: &'static str) -> Result<()> {
    let why = if part.is_empty() {
        "is empty"
    } else if part.contains('/') {
        "contains '/'"
    } else if part.chars().any(|c| c.is_whitespace() || c.is_control()) {
        "contains whitespace"
    } else {
        return Ok(());
    };
    Err(DomainError::InvalidAddress {
        given: part.to_owned(),
        why: format!("{what} {why}"),
    })
}

impl fmt::Display for SpaceAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "space:{}:{}/{}", self.kind, self.tenant, self.stable_id)
    }
}

impl FromStr for SpaceAddress {
    type Err = DomainError;

    fn from_str(s: &str) -> Result<Self> {
        let invalid = |why: &str| DomainError::InvalidAddress {
            given: s.to_owned(),
            why: why.to_owned(),
        };
        let rest = s
            .strip_prefix("space:")
            .ok_or_else(|| invalid("does not start with 'space:'"))?;
        let (kind, rest) = rest.split_once(':').ok_or_else(|| invalid("no kind"))?;
        let kind: SpaceKind = kind.parse().map_err(|_| invalid("unknown space kind"))?;
        let (tenant, stable_id) = rest
            .split_once('/')
            .ok_or_else(|| invalid("no '/' before the stable id"))?;
        SpaceAddress::new(kind, tenant, stable_id)
    }
}

impl Serialize for SpaceAddress {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SpaceAddress {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn prints_the_documented_example() {
        let a = SpaceAddress::new(SpaceKind::GithubRepo, "GitHub.com", "1296269").unwrap();
        assert_eq!(a.to_string(), "space:github-repo:github.com/1296269");
        assert_eq!(a.to_string().parse::<SpaceAddress>().unwrap(), a);
    }

    #[test]
    fn bitbucket_uuid_braces_and_case_do_not_matter() {
        let braced = SpaceAddress::new(
            SpaceKind::BitbucketRepo,
            "{11111111-2222-3333-4444-555555555555}",
            "{673A6070-3421-46C9-9D48-90745F7BFE8E}",
        )
        .unwrap();
        let bare = SpaceAddress::new(
            SpaceKind::BitbucketRepo,
            "11111111-2222-3333-4444-555555555555",
            "673a6070-3421-46c9-9d48-90745f7bfe8e",
        )
        .unwrap();
        assert_eq!(braced, bare);
        assert!(!braced.to_string().contains('{'));
    }

    #[test]
    fn drive_ids_keep_their_case() {
        let a = SpaceAddress::new(SpaceKind::DriveFolder, "acme.com", "1AbC-xyZ").unwrap();
        let b = SpaceAddress::new(SpaceKind::DriveFolder, "acme.com", "1abc-xyz").unwrap();
        assert_ne!(a, b);
        assert_eq!(a.to_string().parse::<SpaceAddress>().unwrap(), a);
    }

    #[test]
    fn rejects_malformed_addresses() {
        for bad in [
            "",
            "space:",
            "github-repo:github.com/1",
            "space:nope:github.com/1",
            "space:github-repo:github.com",
            "space:github-repo:/1",
            "space:github-repo:github.com/",
            "space:github-repo:github.com/1/2",
        ] {
            assert!(
                bad.parse::<SpaceAddress>().is_err(),
                "{bad:?} should not parse"
            );
        }
    }

    #[test]
    fn unknown_platform_lists_the_known_ones() {
        let err = "gitlab".parse::<Platform>().unwrap_err().to_string();
        assert!(err.contains("github, bitbucket, jira, drive"), "{err}");
    }

    proptest! {
        #[test]
        fn print_parse_roundtrip(
            kind in proptest::sample::select(SpaceKind::ALL.to_vec()),
            tenant in "[A-Za-z0-9][A-Za-z0-9.:-]{0,30}",
            id in "[A-Za-z0-9_-]{1,40}",
        ) {
            let a = SpaceAddress::new(kind, &tenant, &id).unwrap();
            let printed = a.to_string();
            let back: SpaceAddress = printed.parse().unwrap();
            prop_assert_eq!(&back, &a);
            prop_assert_eq!(back.to_string(), printed.clone());
            if kind.platform() != Platform::Drive {
                prop_assert_eq!(printed.to_ascii_lowercase(), printed);
            }
        }
    }
}
