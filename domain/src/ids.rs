//! Stable ids are checked where a platform record is mapped.
//!
//! [`SpaceAddress::new`] only refuses what would make an address ambiguous
//! (an empty part, a `/`, whitespace); it has to, since addresses stored by
//! older versions must still parse. A record read from a platform is held
//! to more: its id must look like that platform's stable id, or it is
//! refused. Why: a malformed id is not a harmless oddity. A Bitbucket
//! repository answered with the uuid `"not-a-uuid"` would otherwise become
//! a new space, and the real repository, now absent from the listing, would
//! be marked missing.
//!
//! - GitHub: a positive integer (`1296269`).
//! - Bitbucket: a uuid, in any spelling Bitbucket or a person uses (braces
//!   or not, percent-encoded braces, any case, with or without hyphens);
//!   canonical form: lower-case, hyphenated, no braces. Workspace uuids (the
//!   tenant) likewise.
//! - Jira: a positive integer sent as a string (`"10000"`); the cloudId (the
//!   tenant) is a uuid.
//! - Drive: Drive's id alphabet (`A-Z a-z 0-9 - _`), case kept.

use crate::address::{Platform, SpaceAddress, SpaceKind};
use crate::error::{DomainError, Result};

/// Longest id accepted. Real ones are far shorter (Drive's are ~20–44
/// characters); the cap only stops a hostile answer from growing rows.
const MAX_ID_LEN: usize = 128;

impl SpaceKind {
    /// The canonical stable id of a record of this kind, or why `raw` is not
    /// one.
    pub fn checked_id(self, raw: &str) -> Result<String> {
        let invalid = |why: &'static str| DomainError::InvalidStableId {
            kind: self,
            given: raw.to_owned(),
            why,
        };
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return Err(invalid("is empty"));
        }
        if trimmed.len() > MAX_ID_LEN {
            return Err(invalid("is longer than 128 characters"));
        }
        match self.platform() {
            Platform::Github | Platform::Jira => positive_integer(trimmed).ok_or_else(|| {
                invalid(if self.platform() == Platform::Github {
                    "a GitHub id is a positive integer"
                } else {
                    "a Jira project id is a positive integer"
                })
            }),
            Platform::Bitbucket => {
                canonical_uuid(trimmed).ok_or_else(|| invalid("a Bitbucket id is a uuid"))
            }
            Platform::Drive => {
                if trimmed
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                {
                    Ok(trimmed.to_owned())
                } else {
                    Err(invalid("a Drive id is made of A-Z, a-z, 0-9, '-' and '_'"))
                }
            }
        }
    }
}

impl SpaceAddress {
    /// The address of a record read from a platform: the stable id checked
    /// against its kind ([`SpaceKind::checked_id`]), and for the Atlassian
    /// platforms the tenant too (Bitbucket's workspace uuid, Jira's cloudId).
    pub fn checked(kind: SpaceKind, tenant: &str, raw_id: &str) -> Result<SpaceAddress> {
        let id = kind.checked_id(raw_id)?;
        let tenant = match kind.platform() {
            Platform::Bitbucket | Platform::Jira => {
                canonical_uuid(tenant.trim()).ok_or_else(|| DomainError::InvalidTenant {
                    platform: kind.platform(),
                    given: tenant.to_owned(),
                    why: if kind.platform() == Platform::Jira {
                        "a Jira cloudId is a uuid"
                    } else {
                        "a Bitbucket workspace id is a uuid"
                    }
                    .to_owned(),
                })?
            }
            Platform::Github | Platform::Drive => tenant.to_owned(),
        };
        SpaceAddress::new(kind, &tenant, &id)
    }
}

/// `123` → `"123"`; a sign, a leading zero, zero itself or anything beyond
/// `u64` is refused (platform ids are never written that way).
fn positive_integer(s: &str) -> Option<String> {
    if !s.bytes().all(|b| b.is_ascii_digit()) || s.starts_with('0') {
        return None;
    }
    let n: u64 = s.parse().ok()?;
    (n > 0).then(|| n.to_string())
}

/// Any spelling of a uuid → `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`,
/// lower-case: braces (also `%7B…%7D`), case and hyphens do not matter.
pub fn canonical_uuid(s: &str) -> Option<String> {
    let lower = s.trim().to_ascii_lowercase();
    let unbraced = lower
        .strip_prefix("%7b")
        .and_then(|r| r.strip_suffix("%7d"))
        .or_else(|| lower.strip_prefix('{').and_then(|r| r.strip_suffix('}')))
        .unwrap_or(&lower);
    let hex: String = if unbraced.len() == 36 {
        // Hyphens exactly where a uuid has them.
        let bytes = unbraced.as_bytes();
        if [8, 13, 18, 23].iter().any(|&i| bytes[i] != b'-') {
            return None;
        }
        unbraced.chars().filter(|&c| c != '-').collect()
    } else {
        unbraced.to_owned()
    };
    if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some(format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn github_and_jira_ids_are_positive_integers() {
        for kind in [
            SpaceKind::GithubRepo,
            SpaceKind::GithubOrg,
            SpaceKind::JiraProject,
        ] {
            assert_eq!(kind.checked_id(" 1296269 ").unwrap(), "1296269");
            for bad in [
                "",
                "0",
                "007",
                "-1",
                "12a",
                "1.5",
                "R_kgDO",
                "99999999999999999999",
            ] {
                let err = kind.checked_id(bad).unwrap_err();
                assert!(
                    matches!(err, DomainError::InvalidStableId { .. }),
                    "{kind} {bad:?}: {err}"
                );
            }
        }
    }

    #[test]
    fn every_spelling_of_a_bitbucket_uuid_is_one_id() {
        let canonical = "673a6070-3421-46c9-9d48-90745f7bfe8e";
        for spelling in [
            "{673a6070-3421-46c9-9d48-90745f7bfe8e}",
            "{673A6070-3421-46C9-9D48-90745F7BFE8E}",
            "673a6070-3421-46c9-9d48-90745f7bfe8e",
            "673a6070342146c99d4890745f7bfe8e",
            "%7B673a6070-3421-46c9-9d48-90745f7bfe8e%7D",
        ] {
            assert_eq!(
                SpaceKind::BitbucketRepo.checked_id(spelling).unwrap(),
                canonical,
                "{spelling}"
            );
        }
        for bad in [
            "not-a-uuid",
            "{}",
            "673a6070-3421-46c9-9d48-90745f7bfe8",
            "673a607-03421-46c9-9d48-90745f7bfe8e",
            "{673a6070-3421-46c9-9d48-90745f7bfe8g}",
            "{673a6070-3421-46c9-9d48-90745f7bfe8e",
        ] {
            let err = SpaceKind::BitbucketRepo.checked_id(bad).unwrap_err();
            assert!(err.to_string().contains("uuid"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn drive_ids_keep_their_alphabet_and_case() {
        assert_eq!(
            SpaceKind::DriveFolder.checked_id("1AbC-x_Z").unwrap(),
            "1AbC-x_Z"
        );
        for bad in ["a/b", "a b", "a.b", "é", "a%2Fb"] {
            assert!(SpaceKind::DriveFolder.checked_id(bad).is_err(), "{bad:?}");
        }
        assert!(SpaceKind::DriveFolder.checked_id(&"a".repeat(129)).is_err());
    }

    #[test]
    fn checked_addresses_validate_atlassian_tenants() {
        let a = SpaceAddress::checked(
            SpaceKind::BitbucketRepo,
            "{A15FB181-DB1F-48F7-B41F-E1EFF06929D6}",
            "{673a6070-3421-46c9-9d48-90745f7bfe8e}",
        )
        .unwrap();
        assert_eq!(
            a.to_string(),
            "space:bitbucket-repo:a15fb181-db1f-48f7-b41f-e1eff06929d6/673a6070-3421-46c9-9d48-90745f7bfe8e"
        );
        let err = SpaceAddress::checked(SpaceKind::JiraProject, "acme", "10000").unwrap_err();
        assert!(matches!(err, DomainError::InvalidTenant { .. }), "{err}");
        let err = SpaceAddress::checked(SpaceKind::GithubRepo, "github.com", "x").unwrap_err();
        assert!(err.to_string().contains("positive integer"), "{err}");
    }
}
