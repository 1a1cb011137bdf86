//! The demo's ADMIN side: a few places that match the simulated catalogue
//! (and one that does not), proposals computed, and a one-time admin key.

use cmcp_registry::{PlaceInput, Store};

use crate::error::AdminError;

fn place(id: &str, kind: &str, name: &str, key: Option<&str>) -> PlaceInput {
    PlaceInput {
        id: id.to_owned(),
        kind: kind.to_owned(),
        name: name.to_owned(),
        key: key.map(str::to_owned),
        aliases: Vec::new(),
        members: None,
    }
}

/// DEMO WIRING (for `cmcp-discovery demo`): load demo places, refresh the
/// proposals so they wait on `/admin`, and return a new admin key with the
/// mappings and connections powers. Print the key once; it is not stored.
pub async fn seed_demo_places_and_key(store: &Store) -> Result<String, AdminError> {
    let places = vec![
        place("acme", "client", "Acme", Some("ACME")),
        place("payments", "project", "Payments", Some("PAY")),
        place("platform", "team", "Platform", Some("PLAT")),
        place("mobile", "project", "Mobile App", Some("MOB")),
    ];
    store.put_places(&places, "demo").await?;
    cmcp_matching::refresh_proposals(store, &cmcp_matching::Settings::default()).await?;
    let powers = vec!["mappings".to_owned(), "connections".to_owned()];
    let (_, secret) =
        crate::auth::create_key(store, "demo admin", "admin", &powers, "demo").await?;
    Ok(secret)
}
