//! GitHub wire types → the neutral [`SpaceRecord`].
//!
//! Identity is the numeric `id` inside the connection's tenant: its *web*
//! host (`github.com`, or the GHES host), which comes from the connection's
//! configuration ([`cmcp_domain::github_tenant`]), never from the answer.
//! `api.github.com` and `github.com` name one tenant, and the web host is
//! what people paste. An answer that places a record on another host
//! (`html_url`, `clone_url`, the owner's `html_url`) is outside the tenant
//! and refused ([`foreign_host`]). Everything else a person might use to
//! point at a repository — name, `owner/name`, browser URL, git remotes, the
//! GraphQL `node_id` — becomes an alias.
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

/// The address of a GitHub space in `tenant`, its id checked. The one
/// function listings, direct reads and webhook re-reads build addresses
/// with.
pub fn address(kind: SpaceKind, tenant: &str, id: &str) -> Result<SpaceAddress> {
    SpaceAddress::checked(kind, tenant, id).map_err(|e| ConnectorError::Decode {
        platform: Platform::Github,
        detail: format!("refusing {kind} {id:?}: {e}"),
    })
}

/// The first host an answer names for a record that is not `tenant`: the
/// record lives on another GitHub than the one this connection reads.
/// `ssh_url` is not compared: a GHES may serve SSH under its own name.
pub fn foreign_host<'a>(
    urls: impl IntoIterator<Item = Option<&'a str>>,
    tenant: &str,
) -> Option<String> {
    urls.into_iter()
        .flatten()
        .filter_map(url_host)
        .find(|h| !h.eq_ignore_ascii_case(tenant.trim()))
}

/// The URLs of a repository answer that name its host.
pub fn repo_hosts(repo: &Repo) -> [Option<&str>; 3] {
    [
        repo.html_url.as_deref(),
        repo.clone_url.as_deref(),
        repo.owner.html_url.as_deref(),
    ]
}

fn refuse_foreign(what: String, host: &str, tenant: &str) -> ConnectorError {
    ConnectorError::Decode {
        platform: Platform::Github,
        detail: format!(
            "refusing {what}: GitHub places it on {host}, outside this connection's tenant {tenant} \
             (a GitHub Enterprise Server browsed under another name than its API needs its web host configured)"
        ),
    }
}

fn push(aliases: &mut Vec<Alias>, kind: AliasKind, raw: Option<&str>) {
    if let Some(alias) = raw.and_then(|r| Alias::new(kind, r)) {
        aliases.push(alias);
    }
}

/// The organisation as a container space in `tenant`.
pub fn org_record(org: &Org, tenant: &str) -> Result<SpaceRecord> {
    if let Some(host) = foreign_host([org.html_url.as_deref()], tenant) {
        return Err(refuse_foreign(
            format!("organization {}", org.login),
            &host,
            tenant,
        ));
    }
    let mut aliases = Vec::new();
    push(&mut aliases, AliasKind::Name, Some(&org.login));
    push(&mut aliases, AliasKind::WebUrl, org.html_url.as_deref());
    push(&mut aliases, AliasKind::HostId, org.node_id.as_deref());
    Ok(SpaceRecord {
        address: address(SpaceKind::GithubOrg, tenant, &org.id.to_string())?,
        display_name: org.login.clone(),
        container: None,
        aliases,
        state: SpaceState::default(),
    })
}

/// One repository in `tenant`. Its container is the organisation built
/// from `owner` (for an org listing, `owner.id` is the org id).
pub fn repo_record(repo: &Repo, tenant: &str) -> Result<SpaceRecord> {
    if let Some(host) = foreign_host(repo_hosts(repo), tenant) {
        return Err(refuse_foreign(
            format!("repository {}", repo.full_name),
            &host,
            tenant,
        ));
    }

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
        address: address(SpaceKind::GithubRepo, tenant, &repo.id.to_string())?,
        display_name: repo.full_name.clone(),
        container: Some(address(
            SpaceKind::GithubOrg,
            tenant,
            &repo.owner.id.to_string(),
        )?),
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
        let r = repo_record(&repos[0], "github.com").unwrap();
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
    fn minimal_repo_falls_back_on_the_private_flag() {
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
        let r = repo_record(&repo, "ghe.example.com").unwrap();
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
        let r = org_record(&org, "github.com").unwrap();
        assert_eq!(r.address.to_string(), "space:github-org:github.com/5");
        assert_eq!(r.display_name, "Acme");
        assert!(r.container.is_none());
        assert_eq!(values(&r, AliasKind::Name), ["acme"]);
        assert_eq!(values(&r, AliasKind::WebUrl), ["github.com/acme"]);
        assert_eq!(values(&r, AliasKind::HostId), ["O_kgDOAAAABQ"]);
    }

    #[test]
    fn a_record_on_another_host_is_refused() {
        let repos: Vec<Repo> = serde_json::from_str(DOCS_EXAMPLE).unwrap();
        // The docs example lives on github.com; a GHES connection refuses it.
        let err = repo_record(&repos[0], "ghe.example.com").unwrap_err();
        assert!(
            err.to_string()
                .contains("outside this connection's tenant ghe.example.com"),
            "{err}"
        );
        assert_eq!(
            foreign_host(repo_hosts(&repos[0]), "ghe.example.com").as_deref(),
            Some("github.com")
        );
        assert_eq!(foreign_host(repo_hosts(&repos[0]), "GitHub.com"), None);
        let org: Org = serde_json::from_str(
            r#"{"login": "Acme", "id": 5, "html_url": "https://evil.example/Acme"}"#,
        )
        .unwrap();
        assert!(org_record(&org, "github.com").is_err());
    }

    #[test]
    fn an_id_of_zero_is_refused() {
        let repo: Repo = serde_json::from_str(
            r#"{"id": 0, "name": "x", "full_name": "acme/x", "owner": {"login": "acme", "id": 7}}"#,
        )
        .unwrap();
        let err = repo_record(&repo, "github.com").unwrap_err();
        assert!(err.to_string().contains("positive integer"), "{err}");
    }
}
