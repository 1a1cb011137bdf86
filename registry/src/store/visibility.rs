//! Who is looking. Without a person a reader sees company spaces only; a
//! person sees company spaces and their own private ones, never anyone
//! else's. Reads that serve cMCP (resolve, manifest, change feed) filter by
//! a [`Viewer`] after reading, so a position in the feed means the same
//! thing to every caller.

use cmcp_domain::Owner;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Viewer {
    /// Company spaces only.
    Company,
    /// Company spaces and this person's private spaces.
    Person(String),
}

impl Viewer {
    pub fn person(person: Option<&str>) -> Viewer {
        match person {
            Some(p) => Viewer::Person(p.to_owned()),
            None => Viewer::Company,
        }
    }

    pub fn may_see(&self, owner: &Owner) -> bool {
        match (owner, self) {
            (Owner::Company, _) => true,
            (Owner::Person(p), Viewer::Person(me)) => p == me,
            (Owner::Person(_), Viewer::Company) => false,
        }
    }
}

/// Whether `viewer` may see a space owned by `owner`; `None` is the
/// operator's view from the command line, which sees everything.
pub fn visible(viewer: Option<&Viewer>, owner: &Owner) -> bool {
    viewer.is_none_or(|v| v.may_see(owner))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_person_sees_company_and_own_spaces_only() {
        let alice = Viewer::Person("alice".into());
        assert!(alice.may_see(&Owner::Company));
        assert!(alice.may_see(&Owner::Person("alice".into())));
        assert!(!alice.may_see(&Owner::Person("bob".into())));
        assert!(Viewer::Company.may_see(&Owner::Company));
        assert!(!Viewer::Company.may_see(&Owner::Person("alice".into())));
        assert!(visible(None, &Owner::Person("bob".into())));
    }
}
