//! Bitbucket wire types → the neutral [`SpaceRecord`].
//!
//! Identity is the uuid (braces stripped, lower-case) inside the workspace's
//! uuid: a workspace slug can be changed by its admin and every repository
//! URL changes with it, so the slug is an alias like the names. A repository
//! sits in its project; a project in its workspace.
//!
//! Every uuid is checked where it is mapped ([`SpaceAddress::checked`]): a
//! record whose uuid is not a uuid is refused, never made a space. The
//! tenant is the uuid of the configured workspace; a repository that names
//! another workspace is outside it and refused ([`foreign_workspace`]).

use cmcp_domain::{
    Alias, AliasKind, Platform, SpaceAddress, SpaceKind, SpaceRecord, SpaceState, Visibility,
};

use super::model::{Project, Repo, Workspace};
use crate::error::{ConnectorError, Result};

/// The address of a Bitbucket space: any spelling of the uuids (braces or
/// not, any case) gives the same value; anything that is not a uuid is
/// refused. The one function listings, direct reads and webhook re-reads
/// build addresses with.
pub fn address(kind: SpaceKind, workspace_uuid: &str, uuid: &str) -> Result<SpaceAddress> {
    SpaceAddress::checked(kind, workspace_uuid, uuid).map_err(|e| ConnectorError::Decode {
        platform: Platform::Bitbucket,
        detail: format!("refusing {kind} {uuid:?} in workspace {workspace_uuid:?}: {e}"),
    })
}

/// The workspace a repository answer names, when it is not `tenant` (the
/// configured workspace's uuid).
pub fn foreign_workspace(r: &Repo, tenant: &str) -> Option<String> {
    let named = r.workspace.as_ref()?.uuid.as_str();
    let same = cmcp_domain::canonical_uuid(named)
        .zip(cmcp_domain::canonical_uuid(tenant))
        .is_some_and(|(a, b)| a == b);
    (!same).then(|| named.to_owned())
}

/// A canonical uuid put back in the braces the API expects.
pub fn braced(canonical: &str) -> String {
    let bare = canonical
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}');
    format!("{{{bare}}}")
}

fn push(aliases: &mut Vec<Alias>, kind: AliasKind, raw: Option<&str>) {
    if let Some(alias) = raw.and_then(|r| Alias::new(kind, r))
        && !aliases
            .iter()
            .any(|a| a.kind == kind && a.value == alias.value)
    {
        aliases.push(alias);
    }
}

fn visibility(private: Option<bool>) -> Option<Visibility> {
    private.map(|p| {
        if p {
            Visibility::Private
        } else {
            Visibility::Public
        }
    })
}

/// The workspace as the container space; its uuid is the tenant of every
/// space of the connection.
pub fn workspace_record(ws: &Workspace) -> Result<SpaceRecord> {
    let mut aliases = Vec::new();
    push(&mut aliases, AliasKind::Slug, Some(&ws.slug));
    push(&mut aliases, AliasKind::Name, ws.name.as_deref());
    push(&mut aliases, AliasKind::WebUrl, ws.links.html());
    Ok(SpaceRecord {
        address: address(SpaceKind::BitbucketWorkspace, &ws.uuid, &ws.uuid)?,
        display_name: ws.slug.clone(),
        container: None,
        aliases,
        state: SpaceState {
            visibility: visibility(ws.is_private),
            ..SpaceState::default()
        },
    })
}

/// One project, contained in the workspace.
pub fn project_record(p: &Project, workspace_uuid: &str) -> Result<SpaceRecord> {
    let mut aliases = Vec::new();
    push(&mut aliases, AliasKind::Key, Some(&p.key));
    push(&mut aliases, AliasKind::Name, Some(&p.name));
    push(&mut aliases, AliasKind::WebUrl, p.links.html());
    Ok(SpaceRecord {
        address: address(SpaceKind::BitbucketProject, workspace_uuid, &p.uuid)?,
        display_name: p.name.clone(),
        container: Some(address(
            SpaceKind::BitbucketWorkspace,
            workspace_uuid,
            workspace_uuid,
        )?),
        aliases,
        state: SpaceState {
            visibility: visibility(p.is_private),
            ..SpaceState::default()
        },
    })
}

/// One repository, contained in its project (or the workspace when the
/// answer names none).
pub fn repo_record(r: &Repo, workspace_uuid: &str) -> Result<SpaceRecord> {
    if let Some(other) = foreign_workspace(r, workspace_uuid) {
        return Err(ConnectorError::Decode {
            platform: Platform::Bitbucket,
            detail: format!(
                "refusing repository {}: Bitbucket places it in workspace {other}, outside this \
                 connection's workspace {workspace_uuid}",
                r.full_name
            ),
        });
    }
    let mut aliases = Vec::new();
    push(&mut aliases, AliasKind::FullName, Some(&r.full_name));
    push(&mut aliases, AliasKind::Slug, r.slug.as_deref());
    push(&mut aliases, AliasKind::Name, Some(&r.name));
    push(&mut aliases, AliasKind::WebUrl, r.links.html());
    for c in &r.links.clone {
        push(&mut aliases, AliasKind::GitRemote, c.href.as_deref());
    }
    let container = match &r.project {
        Some(p) => address(SpaceKind::BitbucketProject, workspace_uuid, &p.uuid)?,
        None => address(
            SpaceKind::BitbucketWorkspace,
            workspace_uuid,
            workspace_uuid,
        )?,
    };
    Ok(SpaceRecord {
        address: address(SpaceKind::BitbucketRepo, workspace_uuid, &r.uuid)?,
        display_name: r.full_name.clone(),
        container: Some(container),
        aliases,
        state: SpaceState {
            visibility: visibility(r.is_private),
            ..SpaceState::default()
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const WS: &str = "{a15fb181-db1f-48f7-b41f-e1eff06929d6}";

    fn repo_json(uuid: &str) -> serde_json::Value {
        serde_json::json!({
            "uuid": uuid,
            "full_name": "acme/Billing",
            "name": "Billing",
            "slug": "billing",
            "is_private": true,
            "project": {"uuid": "{11111111-2222-3333-4444-555555555555}", "key": "PAY"},
            "links": {
                "html": {"href": "https://bitbucket.org/acme/billing"},
                "clone": [
                    {"name": "https", "href": "https://me@bitbucket.org/acme/billing.git"},
                    {"name": "ssh", "href": "git@bitbucket.org:acme/billing.git"}
                ]
            }
        })
    }

    #[test]
    fn braces_and_case_of_a_uuid_do_not_change_the_address() {
        let ids = [
            "{673a6070-3421-46c9-9d48-90745f7bfe8e}",
            "673a6070-3421-46c9-9d48-90745f7bfe8e",
            "{673A6070-3421-46C9-9D48-90745F7BFE8E}",
        ];
        let addresses: Vec<_> = ids
            .iter()
            .map(|id| {
                let r: Repo = serde_json::from_value(repo_json(id)).unwrap();
                repo_record(&r, WS).unwrap().address
            })
            .collect();
        assert!(addresses.windows(2).all(|w| w[0] == w[1]));
        assert_eq!(
            addresses[0].to_string(),
            "space:bitbucket-repo:a15fb181-db1f-48f7-b41f-e1eff06929d6/673a6070-3421-46c9-9d48-90745f7bfe8e"
        );
        assert_eq!(braced(addresses[0].stable_id()), ids[0]);
    }

    #[test]
    fn a_repo_has_its_names_urls_and_remotes_and_sits_in_its_project() {
        let r: Repo =
            serde_json::from_value(repo_json("{673a6070-3421-46c9-9d48-90745f7bfe8e}")).unwrap();
        let rec = repo_record(&r, WS).unwrap();
        let got: Vec<(AliasKind, &str)> = rec
            .aliases
            .iter()
            .map(|a| (a.kind, a.value.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                (AliasKind::FullName, "acme/billing"),
                (AliasKind::Slug, "billing"),
                (AliasKind::Name, "billing"),
                (AliasKind::WebUrl, "bitbucket.org/acme/billing"),
                (AliasKind::GitRemote, "bitbucket.org/acme/billing"),
            ]
        );
        assert_eq!(rec.container.unwrap().kind(), SpaceKind::BitbucketProject);
        assert_eq!(rec.state.visibility, Some(Visibility::Private));
    }

    #[test]
    fn a_uuid_that_is_not_a_uuid_is_refused() {
        let r: Repo = serde_json::from_value(repo_json("not-a-uuid")).unwrap();
        let err = repo_record(&r, WS).unwrap_err().to_string();
        assert!(err.contains("not-a-uuid") && err.contains("uuid"), "{err}");
        let mut bad_project = repo_json("{673a6070-3421-46c9-9d48-90745f7bfe8e}");
        bad_project["project"]["uuid"] = serde_json::json!("{PAY}");
        let r: Repo = serde_json::from_value(bad_project).unwrap();
        assert!(repo_record(&r, WS).is_err());
    }

    #[test]
    fn a_repo_of_another_workspace_is_refused() {
        let mut v = repo_json("{673a6070-3421-46c9-9d48-90745f7bfe8e}");
        v["workspace"] = serde_json::json!({"uuid": "{A15FB181-DB1F-48F7-B41F-E1EFF06929D6}"});
        let r: Repo = serde_json::from_value(v.clone()).unwrap();
        assert!(
            repo_record(&r, WS).is_ok(),
            "same workspace, other spelling"
        );
        v["workspace"] = serde_json::json!({"uuid": "{11111111-2222-3333-4444-555555555555}"});
        let r: Repo = serde_json::from_value(v).unwrap();
        let err = repo_record(&r, WS).unwrap_err().to_string();
        assert!(err.contains("outside this connection's workspace"), "{err}");
    }
}
