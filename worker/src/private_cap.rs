//! The daily cap on new private spaces per person.
//!
//! Why: a person's token may read a huge org that no company connection
//! lists, and each of its repos would become one of their private spaces.
//! So a person's syncs create at most `private_spaces_per_day` new spaces
//! per UTC day (across all their connections); the rest are left out of
//! the run — never marked anything, since they have no sighting yet — and
//! wait for the next day's sync. The connection then carries a
//! `private-space-cap` notice, which the person sees with their accounts.

use cmcp_domain::{Owner, RiskCode, RiskNotice, SpaceRecord};
use cmcp_registry::{ConnectionRow, Store};

use crate::Result;

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// What is left of a person's cap during one run.
#[derive(Debug)]
pub struct PrivateCap {
    per_day: u64,
    left: u64,
    held: u64,
}

impl PrivateCap {
    /// The cap of `connection`'s person for today; `None` for a company
    /// connection.
    pub async fn start(
        store: &Store,
        connection: &ConnectionRow,
        per_day: u64,
    ) -> Result<Option<PrivateCap>> {
        let Owner::Person(person) = &connection.owner else {
            return Ok(None);
        };
        let now = chrono::Utc::now().timestamp_millis();
        let today = now - now.rem_euclid(DAY_MS);
        let made = store.private_spaces_created_since(person, today).await?;
        Ok(Some(PrivateCap {
            per_day,
            left: per_day.saturating_sub(made),
            held: 0,
        }))
    }

    /// The page without the new spaces beyond the cap. A space is new when
    /// the registry has no such address: from a person's connection it
    /// would become their private space.
    pub async fn admit(
        &mut self,
        store: &Store,
        page: Vec<SpaceRecord>,
    ) -> Result<Vec<SpaceRecord>> {
        let mut kept = Vec::with_capacity(page.len());
        for record in page {
            if store.get_space(&record.address).await?.is_some() {
                kept.push(record);
            } else if self.left > 0 {
                self.left -= 1;
                kept.push(record);
            } else {
                self.held += 1;
            }
        }
        Ok(kept)
    }

    /// The notice shown to the person when spaces were held back.
    pub fn notice(&self) -> Option<RiskNotice> {
        (self.held > 0).then(|| RiskNotice {
            code: RiskCode::PrivateSpaceCap,
            message: format!(
                "{} new private spaces wait for tomorrow's sync: at most {} are created per person per day",
                self.held, self.per_day
            ),
        })
    }

    pub fn held(&self) -> u64 {
        self.held
    }
}
