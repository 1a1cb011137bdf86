//! Aliases: every name a space is known by besides its stable id.
//!
//! Names, full names, web URLs, git remotes, keys, slugs, paths and host ids
//! change over a space's life. They are stored with their history and looked
//! up in a normalised form, so that every common spelling of the same thing
//! meets one row: `https://github.com/Acme/Repo.git`,
//! `git@github.com:acme/repo.git` and `ssh://git@github.com/acme/repo` all
//! normalise to `github.com/acme/repo`.

use serde::{Deserialize, Serialize};

crate::string_enum! {
    /// What kind of name an alias is.
    pub enum AliasKind: "alias kind" {
        /// A short display name (`Hello-World`).
        Name = "name",
        /// `owner/name` as the platform prints it.
        FullName = "full-name",
        /// The page a person opens in a browser.
        WebUrl = "web-url",
        /// A clone URL in any of its spellings.
        GitRemote = "git-remote",
        /// A project key (Jira `PAY`, Bitbucket `PROJ`).
        Key = "key",
        /// A URL slug (Bitbucket repo slug).
        Slug = "slug",
        /// A path inside a container (Drive folder path).
        Path = "path",
        /// A second, opaque platform id (GitHub `node_id`): case-sensitive.
        HostId = "host-id",
        /// A repository's root (first) commit: its full SHA-1 (40 hex digits)
        /// or SHA-256 (64) object id, lower-case. Forks and mirrors keep
        /// their root commit, so two repos sharing one likely hold the same
        /// history.
        ///
        /// No connector reports it yet: finding the root commit costs one
        /// extra request per repo (walking to the end of the commit list),
        /// which the catalogue syncs do not spend today.
        FirstCommit = "first-commit",
    }
}

impl AliasKind {
    /// The lookup form of `raw` for this kind, or `None` when `raw` cannot be
    /// an alias of this kind (empty, not a remote at all, not a full commit
    /// id).
    pub fn normalise(self, raw: &str) -> Option<String> {
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return None;
        }
        let value = match self {
            AliasKind::Name | AliasKind::Key | AliasKind::Slug => trimmed
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .to_lowercase(),
            AliasKind::WebUrl => normalise_web_url(trimmed)?,
            AliasKind::GitRemote => normalise_git_remote(trimmed)?,
            AliasKind::FullName | AliasKind::Path => {
                let parts: Vec<&str> = trimmed
                    .split('/')
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .collect();
                parts.join("/").to_lowercase()
            }
            AliasKind::HostId => trimmed.to_owned(),
            AliasKind::FirstCommit => normalise_commit_id(trimmed)?,
        };
        (!value.is_empty()).then_some(value)
    }
}

/// One alias as a connector reports it: the raw spelling and its lookup form.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Alias {
    pub kind: AliasKind,
    /// Normalised lookup value.
    pub value: String,
    /// The spelling the platform used, kept for display.
    pub raw: String,
}

impl Alias {
    pub fn new(kind: AliasKind, raw: &str) -> Option<Alias> {
        Some(Alias {
            kind,
            value: kind.normalise(raw)?,
            raw: raw.trim().to_owned(),
        })
    }

    /// What a free-form fingerprint (a remote, a web URL, a full name, a key)
    /// could be. A resolver looks all of them up and reports every match.
    pub fn candidates(input: &str) -> Vec<Alias> {
        let input = input.trim();
        let looks_like_url = input.contains("://") || scp_like(input).is_some();
        let first_segment_is_host = input
            .split('/')
            .next()
            .is_some_and(|h| h.contains('.') && input.contains('/'));
        let kinds: &[AliasKind] = if looks_like_url || first_segment_is_host {
            &[AliasKind::GitRemote, AliasKind::WebUrl]
        } else if input.contains('/') {
            &[AliasKind::FullName, AliasKind::Path]
        } else {
            &[
                AliasKind::Name,
                AliasKind::Key,
                AliasKind::Slug,
                AliasKind::HostId,
                // Only a full 40/64-digit hex id normalises; anything else is dropped.
                AliasKind::FirstCommit,
            ]
        };
        kinds.iter().filter_map(|k| Alias::new(*k, input)).collect()
    }
}

/// A full git object id (SHA-1: 40 hex digits, SHA-256: 64), lower-case;
/// `None` for anything else (abbreviated ids included: they can collide).
fn normalise_commit_id(s: &str) -> Option<String> {
    let ok = matches!(s.len(), 40 | 64) && s.bytes().all(|b| b.is_ascii_hexdigit());
    ok.then(|| s.to_ascii_lowercase())
}

/// `[user@]host:path` (the scp-like git syntax), as `(host, path)`.
fn scp_like(s: &str) -> Option<(&str, &str)> {
    if s.contains("://") {
        return None;
    }
    let (before, path) = s.split_once(':')?;
    if before.contains('/') || path.starts_with("//") || path.is_empty() {
        return None;
    }
    let host = before.rsplit_once('@').map_or(before, |(_, h)| h).trim();
    valid_host_name(host).then_some((host, path))
}

fn valid_host_name(host: &str) -> bool {
    !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-_".contains(c))
}

/// Split `scheme://[userinfo@]host[:port]/path[?query][#fragment]` into host
/// and path; `None` when there is no host.
fn split_url(s: &str) -> Option<(String, String)> {
    let rest = match s.split_once("://") {
        Some((_, rest)) => rest,
        None => s,
    };
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host_port = host_port.trim();
    let host = if let Some(stripped) = host_port.strip_prefix('[') {
        // IPv6 literal: keep the brackets so the result parses again.
        let inner = stripped.split(']').next().unwrap_or_default();
        let ok = !inner.is_empty()
            && inner
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.');
        ok.then(|| format!("[{inner}]"))
    } else {
        let name = host_port.split(':').next().unwrap_or_default();
        valid_host_name(name).then(|| name.to_owned())
    };
    Some((host?.to_ascii_lowercase(), path.to_owned()))
}

fn clean_path(path: &str) -> String {
    let mut segments: Vec<&str> = path
        .split('/')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if let Some(last) = segments.last_mut() {
        let lower = last.to_ascii_lowercase();
        if lower.ends_with(".git") && last.len() > 4 {
            *last = &last[..last.len() - 4];
        }
    }
    segments.join("/").to_lowercase()
}

/// `host/owner/repo`, lower-case, without scheme, user info, port, `.git`,
/// query, fragment or trailing slash.
pub fn normalise_git_remote(raw: &str) -> Option<String> {
    let raw = raw.trim();
    let (host, path) = match scp_like(raw) {
        Some((host, path)) => (
            host.to_ascii_lowercase(),
            path.split(['?', '#']).next().unwrap_or_default().to_owned(),
        ),
        None => split_url(raw)?,
    };
    let path = clean_path(&path);
    if path.is_empty() {
        return None;
    }
    Some(format!("{host}/{path}"))
}

/// `host/path`, lower-case, without scheme, user info, port, query, fragment
/// or trailing slash.
pub fn normalise_web_url(raw: &str) -> Option<String> {
    let (host, path) = split_url(raw.trim())?;
    let path: Vec<&str> = path
        .split('/')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let path = path.join("/").to_lowercase();
    Some(if path.is_empty() {
        host
    } else {
        format!("{host}/{path}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_common_remote_spelling_meets_one_alias() {
        let want = "github.com/acme/repo";
        for spelling in [
            "https://github.com/Acme/Repo.git",
            "https://github.com/acme/repo",
            "https://github.com/acme/repo/",
            "https://github.com/acme/repo.git/",
            "http://github.com/acme/repo",
            "https://user:secret@github.com/acme/repo.git",
            "https://x-access-token@github.com/acme/repo.git",
            "git@github.com:acme/repo.git",
            "git@github.com:Acme/Repo",
            "github.com:acme/repo.git",
            "ssh://git@github.com/acme/repo",
            "ssh://git@github.com/acme/repo.git",
            "ssh://git@github.com:22/acme/repo.git",
            "git+ssh://git@github.com/acme/repo.git",
            "git://github.com/acme/repo.git",
            "  https://GITHUB.COM/acme/repo.git  ",
            "https://github.com:443/acme/repo.git",
            "https://github.com//acme//repo.git",
            "https://github.com/acme/repo.git?foo=bar#frag",
        ] {
            assert_eq!(
                normalise_git_remote(spelling).as_deref(),
                Some(want),
                "{spelling}"
            );
        }
    }

    #[test]
    fn not_remotes() {
        for bad in [
            "",
            "   ",
            "https://",
            "git@github.com:",
            "ssh://git@/acme/repo",
        ] {
            assert_eq!(normalise_git_remote(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn candidates_for_a_full_name_and_a_url() {
        let c = Alias::candidates("Acme/Repo");
        assert!(
            c.iter()
                .any(|a| a.kind == AliasKind::FullName && a.value == "acme/repo")
        );
        let c = Alias::candidates("git@github.com:acme/repo.git");
        assert!(
            c.iter()
                .any(|a| a.kind == AliasKind::GitRemote && a.value == "github.com/acme/repo")
        );
        let c = Alias::candidates("https://github.com/acme/repo");
        assert!(
            c.iter()
                .any(|a| a.kind == AliasKind::WebUrl && a.value == "github.com/acme/repo")
        );
        let c = Alias::candidates("PAY");
        assert!(
            c.iter()
                .any(|a| a.kind == AliasKind::Key && a.value == "pay")
        );
    }

    #[test]
    fn host_ids_keep_their_case() {
        assert_eq!(
            AliasKind::HostId.normalise(" R_kgDOHrjvCw ").as_deref(),
            Some("R_kgDOHrjvCw")
        );
    }

    #[test]
    fn first_commits_are_full_hex_ids_in_lower_case() {
        let sha1 = "A94A8FE5CCB19BA61C4C0873D391E987982FBBD3";
        assert_eq!(
            AliasKind::FirstCommit
                .normalise(&format!("  {sha1}\n"))
                .as_deref(),
            Some("a94a8fe5ccb19ba61c4c0873d391e987982fbbd3")
        );
        let sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        assert_eq!(
            AliasKind::FirstCommit.normalise(sha256).as_deref(),
            Some(sha256)
        );
        let too_long = format!("{sha1}0");
        for bad in [
            "",
            "a94a8fe",
            &sha1[..39],
            too_long.as_str(),
            "g94a8fe5ccb19ba61c4c0873d391e987982fbbd3",
            "a94a8fe5ccb19ba61c4c0873d391e987982fbb d3",
            &sha256[..63],
        ] {
            assert_eq!(AliasKind::FirstCommit.normalise(bad), None, "{bad:?}");
        }
        assert_eq!(
            "first-commit".parse::<AliasKind>().unwrap(),
            AliasKind::FirstCommit
        );
        assert_eq!(AliasKind::FirstCommit.to_string(), "first-commit");
        assert_eq!(
            serde_json::to_string(&AliasKind::FirstCommit).unwrap(),
            "\"first-commit\""
        );
    }

    #[test]
    fn candidates_include_a_first_commit_only_for_full_ids() {
        let sha1 = "A94A8FE5CCB19BA61C4C0873D391E987982FBBD3";
        let c = Alias::candidates(sha1);
        assert!(c.iter().any(|a| a.kind == AliasKind::FirstCommit
            && a.value == "a94a8fe5ccb19ba61c4c0873d391e987982fbbd3"
            && a.raw == sha1));
        for short in ["a94a8fe", "PAY", "cafe"] {
            assert!(
                Alias::candidates(short)
                    .iter()
                    .all(|a| a.kind != AliasKind::FirstCommit),
                "{short}"
            );
        }
    }

    fn segment() -> impl Strategy<Value = String> {
        "[A-Za-z0-9][A-Za-z0-9_-]{0,20}"
    }

    proptest! {
        #[test]
        fn remote_spellings_normalise_equal(
            host in "[a-z][a-z0-9-]{0,10}\\.(com|org|io)",
            owner in segment(),
            repo in segment(),
            git_suffix in any::<bool>(),
            trailing_slash in any::<bool>(),
            upper in any::<bool>(),
        ) {
            let suffix = if git_suffix { ".git" } else { "" };
            let slash = if trailing_slash { "/" } else { "" };
            let (o, r) = if upper { (owner.to_uppercase(), repo.to_uppercase()) } else { (owner.clone(), repo.clone()) };
            let want = format!("{host}/{}/{}", owner.to_lowercase(), repo.to_lowercase());
            for s in [
                format!("https://{host}/{o}/{r}{suffix}{slash}"),
                format!("https://someone:tok@{host}/{o}/{r}{suffix}{slash}"),
                format!("git@{host}:{o}/{r}{suffix}"),
                format!("ssh://git@{host}/{o}/{r}{suffix}{slash}"),
                format!("ssh://git@{host}:2222/{o}/{r}{suffix}"),
                format!("git://{host}/{o}/{r}{suffix}"),
            ] {
                prop_assert_eq!(normalise_git_remote(&s), Some(want.clone()), "{}", s);
            }
        }

        #[test]
        fn normalising_is_idempotent(s in "[ -~]{0,60}") {
            for kind in AliasKind::ALL {
                if let Some(once) = kind.normalise(&s) {
                    // A normalised remote is `host/path`, itself a bare remote.
                    prop_assert_eq!(kind.normalise(&once), Some(once.clone()), "{} {:?}", kind, s);
                }
            }
        }

        #[test]
        fn commit_ids_of_any_case_normalise_to_lower_case(
            id in "([0-9a-fA-F]{40}|[0-9a-fA-F]{64})",
            pad in "[ \t]{0,3}",
        ) {
            let want = id.to_ascii_lowercase();
            let once = AliasKind::FirstCommit.normalise(&format!("{pad}{id}{pad}"));
            prop_assert_eq!(once.as_deref(), Some(want.as_str()));
            prop_assert_eq!(AliasKind::FirstCommit.normalise(&want), Some(want.clone()));
        }

        #[test]
        fn different_repos_never_collide(a in segment(), b in segment(), c in segment()) {
            prop_assume!(b.to_lowercase() != c.to_lowercase());
            let x = normalise_git_remote(&format!("git@github.com:{a}/{b}.git"));
            let y = normalise_git_remote(&format!("git@github.com:{a}/{c}.git"));
            prop_assert_ne!(x, y);
        }
    }
}
