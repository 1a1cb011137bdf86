//! A listing adds up before it is complete.
//!
//! Every page succeeding is not enough for a listing to be evidence that an
//! unseen space is gone. Offset-paged APIs (Bitbucket's `page=N`, Jira's
//! `startAt`, GitHub's page numbers read concurrently) shift when an item
//! is added or deleted while they are read: one item is then served twice
//! and another never. A [`Tally`] follows one listing and turns the signs
//! of that it can see from the pages alone into failures, so the listing is
//! reported incomplete and the registry marks nothing missing on its
//! evidence:
//!
//! - the total the platform reports changing between pages;
//! - at the platform's own end marker, the number of items served not
//!   being the total it reported. A reported total is only a hint for
//!   planning: the listing is read to the end marker whatever it said, and
//!   only then compared.
//!
//! The same item served twice is the third sign, and the one a listing
//! cannot see without keeping every address it served: a set the size of
//! the catalogue. It is found where every address is kept anyway: the
//! registry stamps each sighting with the listing run, and a record whose
//! sighting the run already stamped is counted as repeated
//! (`PageStats::repeated`); the worker then reports the run partial. So a
//! listing's memory does not grow with the catalogue, and copies reach the
//! sink as served.

#[derive(Debug)]
pub struct Tally {
    /// What is listed (`repositories`), for messages.
    what: String,
    /// Records handed on (refused items not included, copies included).
    passed: u64,
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
            passed: 0,
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

    /// `n` records of a page are handed on.
    pub fn passed(&mut self, n: usize) {
        self.passed += n as u64;
    }

    /// Records handed on (a copy served twice counts twice).
    pub fn admitted(&self) -> u64 {
        self.passed
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

    #[test]
    fn a_listing_that_adds_up_has_no_failures() {
        let mut t = Tally::new("projects");
        assert!(t.reported_total(2, "startAt=0"));
        t.served(2);
        t.passed(2);
        assert_eq!(t.admitted(), 2);
        assert!(t.finish(true).is_empty());
    }

    #[test]
    fn a_moved_total_and_a_short_count_are_failures() {
        let mut t = Tally::new("projects");
        t.reported_total(3, "startAt=0");
        t.served(2);
        assert!(!t.reported_total(2, "startAt=1"));
        let failures = t.finish(true);
        assert_eq!(failures.len(), 2, "{failures:?}");
        assert!(failures[0].contains("moved from 3 to 2"), "{failures:?}");
        assert!(failures[1].contains("reported 3 projects but served 2"));
    }

    #[test]
    fn the_count_is_compared_only_at_the_end_marker() {
        let mut t = Tally::new("projects");
        t.reported_total(100, "startAt=0");
        t.served(50);
        assert!(t.finish(false).is_empty());
    }
}
