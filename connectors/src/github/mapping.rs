//! GitHub wire types → the neutral [`SpaceRecord`].
//!
//! Identity is the numeric `id` inside the *web* host (`github.com`, or the
//! GHES host), not the API host: `api.github.com` and `github.com` name one
//! tenant, and the web host is what people paste. Everything else a person
//! might use to point at a repository — name, `owner/name`, browser URL, git
//! remotes, the GraphQL `node_id` — becomes an alias.
//!
//! Git remotes: GitHub sends `clone_url` (https) and `ssh_url` (scp-like);
//! on github.com and every normal GHES they normalise to the same lookup
//! value. We emit `clone_url`, and `ssh_url` only when its lookup value
//! differs (a GHES with a separate SSH host name), so a record never carries
//! two aliases with one lookup value and no information is lost.

use cmcp_domain::{
    Alias, AliasKind, Platform, SpaceAddress, SpaceKind, SpaceRecord, SpaceState, Visibility,
};

use super::model::{Org, Repo};
use crate::error::{ConnectorError, Result};

/// Lower-case host of a URL (`https://GitHub.com/acme` → `github.com`).
pub fn url_host(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url.trim()).ok()?;
    let host = parsed.host_str()?;
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

/// The web host that goes with an API base URL, for when a response lacks
/// `html_url`: `api.github.com` → `github.com`, `api.X.ghe.com` → `X.ghe.com`
/// (GHEC with data residency), a GHES `host/api/v3` → `host`.
pub fn web_host_for_api(api: &url::Url) -> Option<String> {
    let host = api.host_str()?.to_ascii_lowercase();
    Some(match host.strip_prefix("api.") {
        Some(rest) if rest == "github.com" || rest.ends_with(".ghe.com") => rest.to_owned(),
        _ => host,
    })
}

fn address(kind: SpaceKind, host: &str, id: u64) -> Result<SpaceAddress> {
    SpaceAddress::new(kind, host, &id.to_string()).map_err(|e| ConnectorError::Decode {
        platform: Platform::Github,
        detail: format!("cannot address {kind} {id} on {host:?}: {e}"),
    })
}

fn push(aliases: &mut Vec<Alias>, kind: AliasKind, raw: Option<&str>) {
    if let Some(alias) = raw.and_then(|r| Alias::new(kind, r)) {
        aliases.push(alias);
    }
}

/// The organisation as a container space. `fallback_host` is used when the
/// answer has no `html_url`.
pub fn org_record(org: &Org, fallback_host: &str) -> Result<SpaceRecord> {
    let host = org
        .html_url
        .as_deref()
        .and_then(url_host)
        .unwrap_or_else(|| fallback_host.to_owned());
    let mut aliases = Vec::new();
    push(&mut aliases, AliasKind::Name, Some(&org.login));
    push(&mut aliases, AliasKind::WebUrl, org.html_url.as_deref());
    push(&mut aliases, AliasKind::HostId, org.node_id.as_deref());
    Ok(SpaceRecord {
        address: address(SpaceKind::GithubOrg, &host, org.id)?,
        display_name: org.login.clone(),
        container: None,
        aliases,
        state: SpaceState::default(),
    })
}

/// One repository. Its container is the organisation built from `owner`
/// (for an org listing, `owner.id` is the org id).
pub fn repo_record(repo: &Repo, fallback_host: &str) -> Result<SpaceRecord> {
    let host = repo
        .html_url
        .as_deref()
        .and_then(url_host)
        .or_else(|| repo.owner.html_url.as_deref().and_then(url_host))
        .unwrap_or_else(|| fallback_host.to_owned());

    let mut aliases = Vec::new();
    push(&mut aliases, AliasKind::Name, Some(&repo.name));
    push(&mut aliases, AliasKind::FullName, Some(&repo.full_name));
    push(&mut aliases, AliasKind::WebUrl, repo.html_url.as_deref());
    push(
        &mut aliases,
        AliasKind::GitRemote,
        repo.clone_url.as_deref(),
    );
    if let Some(ssh) = repo
        .ssh_url
        .as_deref()
        .and_then(|r| Alias::new(AliasKind::GitRemote, r))
    {
        let duplicate = aliases
            .iter()
            .any(|a| a.kind == AliasKind::GitRemote && a.value == ssh.value);
        if !duplicate {
            aliases.push(ssh);
        }
    }
    push(&mut aliases, AliasKind::HostId, repo.node_id.as_deref());

    let visibility = repo
        .visibility
        .as_deref()
        .and_then(|v| v.to_ascii_lowercase().parse::<Visibility>().ok())
        .or_else(|| {
            repo.private.map(|p| {
                if p {
                    Visibility::Private
                } else {
                    Visibility::Public
                }
            })
        });

    Ok(SpaceRecord {
        address: address(SpaceKind::GithubRepo, &host, repo.id)?,
        display_name: repo.full_name.clone(),
        container: Some(address(SpaceKind::GithubOrg, &host, repo.owner.id)?),
        aliases,
        state: SpaceState {
            archived: repo.archived.unwrap_or(false),
            visibility,
            trashed: false,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GitHub's documented example answer to `GET /orgs/{org}/repos`, as the
    /// fixtures crate ships it (origin in the shared samples' SOURCES.md).
    const DOCS_EXAMPLE: &str =
        include_str!("../../../fixtures/data/github/api-list-org-repos.docs-example.json");

    fn values(r: &SpaceRecord, kind: AliasKind) -> Vec<String> {
        r.aliases
            .iter()
            .filter(|a| a.kind == kind)
            .map(|a| a.value.clone())
            .collect()
    }

    #[test]
    fn documented_example_maps_to_the_expected_record() {
        let repos: Vec<Repo> = serde_json::from_str(DOCS_EXAMPLE).unwrap();
        let r = repo_record(&repos[0], "unused.example").unwrap();
        assert_eq!(
            r.address.to_string(),
            "space:github-repo:github.com/1296269"
        );
        assert_eq!(r.display_name, "octocat/Hello-World");
        assert_eq!(
            r.container.as_ref().map(ToString::to_string).as_deref(),
            Some("space:github-org:github.com/1")
        );
        assert_eq!(values(&r, AliasKind::Name), ["hello-world"]);
        assert_eq!(values(&r, AliasKind::FullName), ["octocat/hello-world"]);
        assert_eq!(
            values(&r, AliasKind::WebUrl),
            ["github.com/octocat/hello-world"]
        );
        // clone_url and ssh_url meet in one lookup value: one alias.
        assert_eq!(
            values(&r, AliasKind::GitRemote),
            ["github.com/octocat/hello-world"]
        );
        assert_eq!(
            values(&r, AliasKind::HostId),
            ["MDEwOlJlcG9zaXRvcnkxMjk2MjY5"]
        );
        assert_eq!(r.aliases.len(), 5);
        assert_eq!(r.canonical_aliases().len(), 5);
        assert_eq!(
            r.state,
            SpaceState {
                archived: false,
                visibility: Some(Visibility::Public),
                trashed: false
            }
        );
    }

    #[test]
    fn minimal_repo_falls_back_on_private_flag_and_host() {
        let repo: Repo = serde_json::from_str(
            r#"{"id": 42, "name": "x", "full_name": "acme/x", "owner": {"login": "acme", "id": 7},
                "private": true, "archived": null, "visibility": null, "brand_new_field": [1, 2]}"#,
        )
        .unwrap();
        let r = repo_record(&repo, "GHE.Example.com").unwrap();
        assert_eq!(
            r.address.to_string(),
            "space:github-repo:ghe.example.com/42"
        );
        assert_eq!(r.state.visibility, Some(Visibility::Private));
        assert!(!r.state.archived);
        assert_eq!(r.aliases.len(), 2); // name and full name only
    }

    #[test]
    fn internal_archived_ghes_repo_keeps_a_distinct_ssh_remote() {
        let repo: Repo = serde_json::from_str(
            r#"{"id": 9, "node_id": "R_kgDOAAAACQ", "name": "Core", "full_name": "Acme/Core",
                "owner": {"login": "Acme", "id": 5}, "private": true, "archived": true,
                "visibility": "internal",
                "html_url": "https://GHE.example.com/Acme/Core",
                "clone_url": "https://ghe.example.com/Acme/Core.git",
                "ssh_url": "git@ssh.ghe.example.com:Acme/Core.git"}"#,
        )
        .unwrap();
        let r = repo_record(&repo, "unused").unwrap();
        assert_eq!(r.address.to_string(), "space:github-repo:ghe.example.com/9");
        assert_eq!(
            r.container.as_ref().unwrap().to_string(),
            "space:github-org:ghe.example.com/5"
        );
        assert!(r.state.archived);
        assert_eq!(r.state.visibility, Some(Visibility::Internal));
        assert_eq!(
            values(&r, AliasKind::GitRemote),
            ["ghe.example.com/acme/core", "ssh.ghe.example.com/acme/core"]
        );
    }

    #[test]
    fn org_is_a_container_keyed_on_its_id() {
        let org: Org = serde_json::from_str(
            r#"{"login": "Acme", "id": 5, "node_id": "O_kgDOAAAABQ", "html_url": "https://github.com/Acme", "name": null}"#,
        )
        .unwrap();
        let r = org_record(&org, "unused").unwrap();
        assert_eq!(r.address.to_string(), "space:github-org:github.com/5");
        assert_eq!(r.display_name, "Acme");
        assert!(r.container.is_none());
        assert_eq!(values(&r, AliasKind::Name), ["acme"]);
        assert_eq!(values(&r, AliasKind::WebUrl), ["github.com/acme"]);
        assert_eq!(values(&r, AliasKind::HostId), ["O_kgDOAAAABQ"]);
    }

    #[test]
    fn web_host_for_api_bases() {
        let host = |s: &str| web_host_for_api(&url::Url::parse(s).unwrap()).unwrap();
        assert_eq!(host("https://api.github.com"), "github.com");
        assert_eq!(host("https://api.acme.ghe.com/"), "acme.ghe.com");
        assert_eq!(host("https://GHE.example.com/api/v3"), "ghe.example.com");
        assert_eq!(host("http://127.0.0.1:8080/api/v3"), "127.0.0.1");
    }
}
