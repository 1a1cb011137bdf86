//! The Drive harness: a registry, a simulated Workspace domain, a Drive
//! connection between them, and the assertion that the registry equals the
//! domain exactly.

use std::collections::{BTreeMap, BTreeSet};

use cmcp_domain::{
    AliasKind, ConnectionSpec, Owner, Platform, SpaceAddress, SpaceKind, SpaceStatus, Token,
};
use cmcp_registry::testing::{TestDb, cipher};
use cmcp_registry::{NewConnection, SpaceFilter, Store};
use cmcp_worker::SyncContext;

use crate::{fast_http, init_tls, sync_context};

/// The Drive connection of the Drive end-to-end tests.
pub const DRIVE_CONNECTION: &str = "drive-example";

/// A registry, a simulated Workspace domain, and a Drive connection between
/// them (listing `depth` folder levels).
pub struct DriveHarness {
    pub db: TestDb,
    pub sim: cmcp_fixtures::DriveSim,
    pub ctx: SyncContext,
    pub depth: u32,
}

impl DriveHarness {
    pub async fn start(
        db: TestDb,
        sim_cfg: cmcp_fixtures::DriveSimConfig,
        depth: u32,
    ) -> DriveHarness {
        init_tls();
        let sim = cmcp_fixtures::DriveSim::start(sim_cfg)
            .await
            .expect("drive simulator");
        db.store
            .create_connection(
                &cipher(),
                NewConnection {
                    id: DRIVE_CONNECTION.to_owned(),
                    spec: ConnectionSpec {
                        platform: Platform::Drive,
                        scope: sim.domain(),
                        base_url: sim.base_url(),
                    },
                    owner: Owner::Company,
                    token: Token::new(cmcp_fixtures::drive::TEST_SERVICE_ACCOUNT_JSON),
                    settings: serde_json::json!({
                        "subject": "admin@example.com",
                        "depth": depth,
                        "domain_admin_access": true,
                        "token_url": sim.token_url(),
                    }),
                },
                "test",
            )
            .await
            .expect("add drive connection");
        let ctx = sync_context(&db.store, fast_http());
        DriveHarness {
            db,
            sim,
            ctx,
            depth,
        }
    }

    pub fn store(&self) -> &Store {
        &self.db.store
    }

    pub fn folder_address(&self, id: &str) -> SpaceAddress {
        SpaceAddress::new(SpaceKind::DriveFolder, &self.sim.domain(), id).expect("address")
    }

    pub fn drive_address(&self, id: &str) -> SpaceAddress {
        SpaceAddress::new(SpaceKind::DriveSharedDrive, &self.sim.domain(), id).expect("address")
    }
}

/// One Drive space as compared: display name, container, active aliases.
pub type DriveRow = (String, Option<SpaceAddress>, BTreeSet<(AliasKind, String)>);

fn normalised(pairs: [(AliasKind, &str); 3]) -> BTreeSet<(AliasKind, String)> {
    pairs
        .into_iter()
        .map(|(k, v)| (k, k.normalise(v).expect("normalises")))
        .collect()
}

/// What the registry must hold for the simulator's domain at `depth`:
/// every drive, every non-trashed folder within the depth.
pub fn expected_drive_registry(h: &DriveHarness) -> BTreeMap<SpaceAddress, DriveRow> {
    let mut out = BTreeMap::new();
    for d in h.sim.drives() {
        let url = format!("https://drive.google.com/drive/folders/{}", d.id);
        out.insert(
            h.drive_address(&d.id),
            (
                d.name.clone(),
                None,
                normalised([
                    (AliasKind::Name, &d.name),
                    (AliasKind::Path, &d.name),
                    (AliasKind::WebUrl, &url),
                ]),
            ),
        );
    }
    for f in h.sim.folders() {
        if f.trashed || f.depth > h.depth {
            continue;
        }
        let container = if f.parent == f.drive_id {
            h.drive_address(&f.parent)
        } else {
            h.folder_address(&f.parent)
        };
        out.insert(
            h.folder_address(&f.id),
            (
                f.path.clone(),
                Some(container),
                normalised([
                    (AliasKind::Name, &f.name),
                    (AliasKind::Path, &f.path),
                    (AliasKind::WebUrl, &f.web_view_link),
                ]),
            ),
        );
    }
    out
}

/// The registry's active spaces of the Drive connection, as compared.
pub async fn drive_registry(store: &Store) -> BTreeMap<SpaceAddress, DriveRow> {
    let spaces = store
        .list_spaces(&SpaceFilter {
            connection_id: Some(DRIVE_CONNECTION.to_owned()),
            status: Some(SpaceStatus::Active),
            ..Default::default()
        })
        .await
        .expect("list");
    let mut aliases: BTreeMap<SpaceAddress, BTreeSet<(AliasKind, String)>> = BTreeMap::new();
    for a in store
        .active_aliases(DRIVE_CONNECTION)
        .await
        .expect("aliases")
    {
        aliases
            .entry(a.space_address.clone())
            .or_default()
            .insert((a.kind, a.value));
    }
    spaces
        .into_iter()
        .map(|s| {
            let a = aliases.remove(&s.address).unwrap_or_default();
            (s.address, (s.display_name, s.container, a))
        })
        .collect()
}

/// The registry's active Drive spaces equal the simulator's domain exactly.
pub async fn assert_drive_registry_matches(h: &DriveHarness) {
    let got = drive_registry(h.store()).await;
    let want = expected_drive_registry(h);
    assert_eq!(got.len(), want.len(), "active Drive spaces vs upstream");
    for (address, row) in &want {
        assert_eq!(got.get(address), Some(row), "{address}");
    }
}
