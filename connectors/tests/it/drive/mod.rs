//! The Drive connector against the simulated Workspace domain.

mod changes;
mod listing;

use std::collections::BTreeSet;

use cmcp_connectors::drive::{DriveConnector, DriveSettings};
use cmcp_domain::{AliasKind, SpaceRecord, Token};
use cmcp_fixtures::drive::TEST_SERVICE_ACCOUNT_JSON;
use cmcp_fixtures::{DriveSim, DriveSimConfig};

use crate::support::fast_cfg;

pub const ADMIN: &str = "admin@example.com";

pub async fn start(cfg: DriveSimConfig) -> DriveSim {
    let _ = rustls::crypto::ring::default_provider().install_default();
    DriveSim::start(cfg).await.expect("drive simulator")
}

pub fn settings(sim: &DriveSim, depth: u32) -> DriveSettings {
    DriveSettings {
        subject: ADMIN.into(),
        depth,
        domain_admin_access: true,
        token_url: Some(sim.token_url()),
        tokeninfo_url: None,
    }
}

pub fn connector_with(sim: &DriveSim, settings: DriveSettings) -> DriveConnector {
    DriveConnector::new(
        &sim.base_url(),
        &sim.domain(),
        Token::new(TEST_SERVICE_ACCOUNT_JSON),
        settings,
        fast_cfg(),
    )
    .expect("connector")
}

pub fn connector(sim: &DriveSim, depth: u32) -> DriveConnector {
    connector_with(sim, settings(sim, depth))
}

/// (address, display name, container, name, path, web url) of a record.
pub type Row = (String, String, Option<String>, String, String, String);

pub fn row(r: &SpaceRecord) -> Row {
    let alias = |k: AliasKind| {
        r.aliases
            .iter()
            .filter(|a| a.kind == k)
            .map(|a| a.raw.clone())
            .collect::<Vec<_>>()
            .join("|")
    };
    (
        r.address.to_string(),
        r.display_name.clone(),
        r.container.as_ref().map(ToString::to_string),
        alias(AliasKind::Name),
        alias(AliasKind::Path),
        alias(AliasKind::WebUrl),
    )
}

/// What a listing to `depth` must give, computed from the simulator.
pub fn expected(sim: &DriveSim, depth: u32) -> BTreeSet<Row> {
    let domain = sim.domain();
    let mut out = BTreeSet::new();
    for d in sim.drives() {
        out.insert((
            format!("space:drive-shared-drive:{domain}/{}", d.id),
            d.name.clone(),
            None,
            d.name.clone(),
            d.name.clone(),
            format!("https://drive.google.com/drive/folders/{}", d.id),
        ));
    }
    for f in sim.folders() {
        if f.trashed || f.depth > depth {
            continue;
        }
        let container = if f.parent == f.drive_id {
            format!("space:drive-shared-drive:{domain}/{}", f.parent)
        } else {
            format!("space:drive-folder:{domain}/{}", f.parent)
        };
        out.insert((
            format!("space:drive-folder:{domain}/{}", f.id),
            f.path.clone(),
            Some(container),
            f.name.clone(),
            f.path.clone(),
            f.web_view_link.clone(),
        ));
    }
    out
}
