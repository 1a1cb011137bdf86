//! Seeding helpers: a Bitbucket connection, projects with keys, repos.

use cmcp_domain::{
    Alias, AliasKind, ConnectionSpec, Owner, Platform, SpaceAddress, SpaceKind, SpaceRecord,
    SpaceState, Token,
};
use cmcp_registry::testing::cipher;
use cmcp_registry::{NewConnection, PlaceInput, Store};

pub async fn connection(store: &Store, id: &str) {
    connection_of(store, id, Owner::Company).await;
}

pub async fn connection_of(store: &Store, id: &str, owner: Owner) {
    store
        .create_connection(
            &cipher(),
            NewConnection {
                id: id.to_owned(),
                spec: ConnectionSpec {
                    platform: Platform::Bitbucket,
                    scope: "acme".to_owned(),
                    base_url: "https://api.bitbucket.org/2.0".to_owned(),
                },
                owner,
                token: Token::new("t0ken-for-tests"),
                settings: serde_json::json!({}),
            },
            "test",
        )
        .await
        .unwrap();
}

pub fn project(n: usize, key: &str, name: &str) -> SpaceRecord {
    let address =
        SpaceAddress::new(SpaceKind::BitbucketProject, "acme", &format!("{{p-{n}}}")).unwrap();
    SpaceRecord {
        address,
        display_name: name.to_owned(),
        container: None,
        aliases: [
            Alias::new(AliasKind::Key, key),
            Alias::new(AliasKind::Name, name),
        ]
        .into_iter()
        .flatten()
        .collect(),
        state: SpaceState::default(),
    }
}

pub fn repo(n: usize, project: &SpaceRecord, name: &str, remote: &str) -> SpaceRecord {
    let address =
        SpaceAddress::new(SpaceKind::BitbucketRepo, "acme", &format!("{{r-{n}}}")).unwrap();
    SpaceRecord {
        address,
        display_name: name.to_owned(),
        container: Some(project.address.clone()),
        aliases: [
            Alias::new(AliasKind::Name, name),
            Alias::new(AliasKind::GitRemote, remote),
        ]
        .into_iter()
        .flatten()
        .collect(),
        state: SpaceState::default(),
    }
}

pub async fn put(store: &Store, records: &[SpaceRecord]) {
    store
        .apply_page("bb", &Owner::Company, records)
        .await
        .unwrap();
}

pub fn place(id: &str, name: &str, key: Option<&str>) -> PlaceInput {
    PlaceInput {
        id: id.to_owned(),
        kind: "project".to_owned(),
        name: name.to_owned(),
        key: key.map(str::to_owned),
        aliases: vec![],
        members: None,
    }
}

pub async fn refresh(store: &Store) -> cmcp_registry::ProposalFigures {
    cmcp_matching::refresh_proposals(store, &cmcp_matching::Settings::default())
        .await
        .unwrap()
}

pub async fn proposals(store: &Store, state: &str) -> Vec<cmcp_registry::ProposalRow> {
    store
        .list_proposals(&cmcp_registry::ProposalFilter {
            state: Some(state.parse().expect("a proposal state")),
            ..Default::default()
        })
        .await
        .unwrap()
}
