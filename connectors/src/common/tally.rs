//! A listing adds up before it is complete.
//!
//! Every page succeeding is not enough for a listing to be evidence that an
//! unseen space is gone. Offset-paged APIs (Bitbucket's `page=N`, Jira's
//! `startAt`, GitHub's page numbers read concurrently) shift when an item
//! is added or deleted while they are read: one item is then served twice
//! and another never. A [`Tally`] follows one listing and turns every sign
//! of that into a failure, so the listing is reported incomplete and the
//! registry marks nothing missing on its evidence:
//!
//! - the same stable id served twice (the copy is dropped);
//! - the total the platform reports changing between pages;
//! - at the platform's own end marker, the number of items served not
//!   being the total it reported. A reported total is only a hint for
//!   planning: the listing is read to the end marker whatever it said, and
//!   only then compared.
//!
//! It holds a 64-bit fingerprint of each address seen, not the address:
//! memory grows with the catalogue (8 bytes an item, under 2 MB at the
//! 100,000 repositories a tenant may have), never with a number an
//! upstream sends. The fingerprints are keyed per listing with a random
//! key, so no upstream can craft two ids that collide; an accidental
//! collision (about one in 10^9 listings of 100,000 items) costs a
//! needless partial listing, never a wrong "gone".

use std::collections::HashSet;
use std::hash::BuildHasher;

use cmcp_domain::{SpaceAddress, SpaceRecord};

#[derive(Debug)]
pub struct Tally {
    /// What is listed (`repositories`), for messages.
    what: String,
    /// Keys the fingerprints of this listing.
    keys: std::collections::hash_map::RandomState,
    seen: HashSet<u64>,
    /// Items the platform served, refused ones and copies included.
    served: u64,
    /// The first total the platform reported, if any.
    reported: Option<u64>,
    failures: Vec<String>,
}

impl Tally {
    pub fn new(what: &str) -> Tally {
        Tally {
            what: what.to_owned(),
            keys: std::collections::hash_map::RandomState::new(),
            seen: HashSet::new(),
            served: 0,
            reported: None,
            failures: Vec::new(),
        }
    }

    /// A page served `n` items.
    pub fn served(&mut self, n: usize) {
        self.served += n as u64;
    }

    /// A total the platform reported with a page (`at` names the page). A
    /// different total than before means items came or went while the
    /// listing was read: its offsets may have shifted. Returns whether the
    /// total held.
    pub fn reported_total(&mut self, total: u64, at: &str) -> bool {
        match self.reported {
            None => {
                self.reported = Some(total);
                true
            }
            Some(first) if first == total => true,
            Some(first) => {
                self.failures.push(format!(
                    "{at}: the {} count moved from {first} to {total} during the listing; \
                     its offsets may have shifted, so an item may have been skipped",
                    self.what
                ));
                false
            }
        }
    }

    /// Keeps `record` unless its address was already listed: then the
    /// listing shifted (or the platform repeats itself) and is not evidence
    /// of anything being gone.
    pub fn admit(&mut self, record: SpaceRecord, at: &str) -> Option<SpaceRecord> {
        if self.seen.insert(self.fingerprint(&record.address)) {
            Some(record)
        } else {
            self.failures.push(format!(
                "{at}: {} was listed twice; the listing shifted under us, so another item \
                 may have been skipped",
                record.address
            ));
            None
        }
    }

    /// Whether an address was already listed.
    pub fn has_seen(&self, address: &SpaceAddress) -> bool {
        self.seen.contains(&self.fingerprint(address))
    }

    fn fingerprint(&self, address: &SpaceAddress) -> u64 {
        self.keys.hash_one(address)
    }

    /// Distinct records admitted.
    pub fn admitted(&self) -> u64 {
        self.seen.len() as u64
    }

    /// A failure found by the listing itself (a refused item, a page that
    /// could not be read).
    pub fn fail(&mut self, why: String) {
        self.failures.push(why);
    }

    pub fn is_clean(&self) -> bool {
        self.failures.is_empty()
    }

    /// The failures, once the listing stopped. `reached_end`: the platform's
    /// end marker was read (only then is the count compared with the total).
    pub fn finish(mut self, reached_end: bool) -> Vec<String> {
        if reached_end
            && let Some(total) = self.reported
            && total != self.served
        {
            self.failures.push(format!(
                "the platform reported {total} {} but served {} before its end marker",
                self.what, self.served
            ));
        }
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cmcp_domain::{SpaceKind, SpaceState};

    fn record(id: &str) -> SpaceRecord {
        SpaceRecord {
            address: SpaceAddress::new(SpaceKind::JiraProject, "site", id).unwrap(),
            display_name: id.to_owned(),
            container: None,
            aliases: Vec::new(),
            state: SpaceState::default(),
        }
    }

    #[test]
    fn a_listing_that_adds_up_has_no_failures() {
        let mut t = Tally::new("projects");
        assert!(t.reported_total(2, "startAt=0"));
        t.served(2);
        assert!(t.admit(record("1"), "startAt=0").is_some());
        assert!(t.admit(record("2"), "startAt=0").is_some());
        assert_eq!(t.admitted(), 2);
        assert!(t.finish(true).is_empty());
    }

    #[test]
    fn a_duplicate_a_moved_total_and_a_short_count_are_failures() {
        let mut t = Tally::new("projects");
        t.reported_total(3, "startAt=0");
        t.served(2);
        assert!(t.admit(record("1"), "startAt=0").is_some());
        assert!(t.admit(record("1"), "startAt=1").is_none());
        assert!(!t.reported_total(2, "startAt=1"));
        let failures = t.finish(true);
        assert_eq!(failures.len(), 3, "{failures:?}");
        assert!(failures[0].contains("listed twice"), "{failures:?}");
        assert!(failures[1].contains("moved from 3 to 2"), "{failures:?}");
        assert!(failures[2].contains("reported 3 projects but served 2"));
    }

    #[test]
    fn the_count_is_compared_only_at_the_end_marker() {
        let mut t = Tally::new("projects");
        t.reported_total(100, "startAt=0");
        t.served(50);
        assert!(t.finish(false).is_empty());
    }
}
