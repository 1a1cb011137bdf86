//! Jira wire types → the neutral [`SpaceRecord`].
//!
//! Identity is the project id inside the site's cloudId. Keys change (and
//! the old ones keep redirecting in Jira), so every key in `projectKeys` is
//! a Key alias: a reference written with an old key still resolves. The
//! id must be Jira's numeric project id and the cloudId a uuid
//! ([`SpaceAddress::checked`]): anything else is refused, never a space.

use cmcp_domain::{Alias, AliasKind, Platform, SpaceAddress, SpaceKind, SpaceRecord, SpaceState};

use super::model::Project;
use crate::error::{ConnectorError, Result};

/// The address of a project: the one function listings, direct reads and
/// webhook re-reads build addresses with.
pub fn address(cloud_id: &str, id: &str) -> Result<SpaceAddress> {
    SpaceAddress::checked(SpaceKind::JiraProject, cloud_id, id).map_err(|e| {
        ConnectorError::Decode {
            platform: Platform::Jira,
            detail: format!("refusing project {id:?} of site {cloud_id:?}: {e}"),
        }
    })
}

fn push(aliases: &mut Vec<Alias>, kind: AliasKind, raw: &str) {
    if let Some(alias) = Alias::new(kind, raw)
        && !aliases
            .iter()
            .any(|a| a.kind == kind && a.value == alias.value)
    {
        aliases.push(alias);
    }
}

/// One project. `site` is the web origin people browse
/// (`https://acme.atlassian.net`), whatever API base the connection uses.
pub fn project_record(p: &Project, cloud_id: &str, site: &str) -> Result<SpaceRecord> {
    let address = address(cloud_id, &p.id)?;
    let mut aliases = Vec::new();
    push(&mut aliases, AliasKind::Key, &p.key);
    for k in &p.project_keys {
        push(&mut aliases, AliasKind::Key, k);
    }
    push(&mut aliases, AliasKind::Name, &p.name);
    push(
        &mut aliases,
        AliasKind::WebUrl,
        &format!("{}/browse/{}", site.trim_end_matches('/'), p.key),
    );
    Ok(SpaceRecord {
        address,
        display_name: p.name.clone(),
        container: None,
        aliases,
        state: SpaceState {
            archived: p.archived,
            visibility: None,
            trashed: p.deleted,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_ever_held_is_an_alias_and_ids_become_text() {
        let p: Project = serde_json::from_value(serde_json::json!({
            "id": 10000, "key": "PAY", "name": "Payments",
            "projectKeys": ["PAY", "BILL"], "deleted": true
        }))
        .unwrap();
        let r = project_record(
            &p,
            "a436116f-02ce-4520-8fbb-7301462a1674",
            "https://acme.atlassian.net",
        )
        .unwrap();
        assert_eq!(
            r.address.to_string(),
            "space:jira-project:a436116f-02ce-4520-8fbb-7301462a1674/10000"
        );
        let keys: Vec<&str> = r
            .aliases
            .iter()
            .filter(|a| a.kind == AliasKind::Key)
            .map(|a| a.value.as_str())
            .collect();
        assert_eq!(keys, ["pay", "bill"]);
        assert!(
            r.aliases
                .iter()
                .any(|a| a.kind == AliasKind::WebUrl && a.value == "acme.atlassian.net/browse/pay")
        );
        assert!(r.state.trashed);
    }

    #[test]
    fn a_project_id_that_is_not_numeric_is_refused() {
        for id in ["PAY", "", "0", "10000x"] {
            let p: Project = serde_json::from_value(serde_json::json!({
                "id": id, "key": "PAY", "name": "Payments"
            }))
            .unwrap();
            let err = project_record(
                &p,
                "a436116f-02ce-4520-8fbb-7301462a1674",
                "https://acme.atlassian.net",
            )
            .unwrap_err()
            .to_string();
            assert!(err.contains("refusing project"), "{id:?}: {err}");
        }
    }
}
