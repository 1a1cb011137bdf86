//! What the store suites share: a GitHub connection and repo records.

use cmcp_domain::{
    Alias, AliasKind, ConnectionSpec, Owner, Platform, SpaceAddress, SpaceKind, SpaceRecord,
    SpaceState, Token, Visibility,
};
use cmcp_registry::testing::{TestDb, cipher, postgres_admin_url};
use cmcp_registry::{NewConnection, Store};

pub const TOKEN: &str = "ghp_conformanceSECRET0123456789";

/// A fresh PostgreSQL registry for a test that is about PostgreSQL alone,
/// with its pool; `None` (and a note) when none is configured, which CI
/// never allows (`postgres_admin_url` gives its server there).
pub async fn postgres_only() -> Option<(TestDb, sqlx::PgPool)> {
    let Some(admin_url) = postgres_admin_url() else {
        eprintln!("note: skipped: no PostgreSQL configured");
        return None;
    };
    let db = TestDb::postgres_on(&admin_url, None).await;
    let Store::Postgres(pool) = &db.store else {
        unreachable!("a PostgreSQL URL")
    };
    let pool = pool.clone();
    Some((db, pool))
}

/// The wall clock in Unix milliseconds, as the store stamps its rows.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Runs one statement of raw SQL on either backend, as a test that tries
/// to break the store on purpose does; the store's refusal is the result.
pub async fn try_exec(store: &Store, sql: &'static str) -> Result<(), sqlx::Error> {
    match store {
        Store::Sqlite(pool) => sqlx::query(sql).execute(pool).await.map(drop),
        Store::Postgres(pool) => sqlx::query(sql).execute(pool).await.map(drop),
    }
}

pub async fn add_connection(store: &Store, id: &str, owner: Owner) {
    store
        .create_connection(
            &cipher(),
            NewConnection {
                id: id.to_owned(),
                spec: ConnectionSpec {
                    platform: Platform::Github,
                    scope: "acme".to_owned(),
                    base_url: "https://api.github.com".to_owned(),
                },
                owner,
                token: Token::new(TOKEN),
                settings: serde_json::json!({}),
            },
            "test",
        )
        .await
        .unwrap();
}

pub fn org() -> SpaceAddress {
    SpaceAddress::new(SpaceKind::GithubOrg, "github.com", "9000001").unwrap()
}

pub fn repo(id: u64, owner: &str, name: &str) -> SpaceRecord {
    let full = format!("{owner}/{name}");
    SpaceRecord {
        address: SpaceAddress::new(SpaceKind::GithubRepo, "github.com", &id.to_string()).unwrap(),
        display_name: full.clone(),
        container: Some(org()),
        aliases: [
            Alias::new(AliasKind::Name, name),
            Alias::new(AliasKind::FullName, &full),
            Alias::new(AliasKind::WebUrl, &format!("https://github.com/{full}")),
            Alias::new(
                AliasKind::GitRemote,
                &format!("https://github.com/{full}.git"),
            ),
            Alias::new(AliasKind::GitRemote, &format!("git@github.com:{full}.git")),
            Alias::new(AliasKind::HostId, &format!("R_node{id}")),
        ]
        .into_iter()
        .flatten()
        .collect(),
        state: SpaceState {
            archived: false,
            visibility: Some(Visibility::Private),
            trashed: false,
        },
    }
}

pub fn addr(id: u64) -> SpaceAddress {
    SpaceAddress::new(SpaceKind::GithubRepo, "github.com", &id.to_string()).unwrap()
}
