//! Fine-grained token check: does the credential report write access?
//!
//! A fine-grained PAT (or an App token) sends no `X-OAuth-Scopes`, and no
//! endpoint says what such a token holds; the error header
//! `X-Accepted-GitHub-Permissions` only names what an endpoint *needs*. What
//! every repository object does carry is `permissions`
//! (`admin`, `maintain`, `push`, `triage`, `pull`) as GitHub grants them to
//! the caller. So a token without a scopes header whose listing reports
//! `push`, `maintain` or `admin` on some repository is taken as one that can
//! write, and shown as a risk (never refused), like a classic `repo` scope.
//! That the object reflects the token's grant rather than only the
//! account's role is an inference from the reference, not documented
//! behaviour; flagging too much is the safe direction for a notice.

use cmcp_domain::{RiskCode, RiskNotice};
use serde::Deserialize;

/// The `permissions` object of a repository.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct Permissions {
    #[serde(default)]
    pub admin: bool,
    #[serde(default)]
    pub maintain: bool,
    #[serde(default)]
    pub push: bool,
    #[serde(default)]
    pub triage: bool,
    #[serde(default)]
    pub pull: bool,
}

impl Permissions {
    /// The strongest write permission granted, if any.
    pub fn write(&self) -> Option<&'static str> {
        if self.admin {
            Some("admin")
        } else if self.maintain {
            Some("maintain")
        } else if self.push {
            Some("push")
        } else {
            None
        }
    }
}

/// Most repositories named in the notice; the count says the rest.
const NAMED: usize = 3;

/// The repositories a listing reported write access on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Writable {
    /// How many repositories reported write access.
    pub count: u64,
    /// The first few, as `full_name: permission`.
    pub examples: Vec<String>,
}

impl Writable {
    pub fn note(&mut self, full_name: &str, permissions: Option<&Permissions>) {
        if let Some(p) = permissions.and_then(Permissions::write) {
            self.count += 1;
            if self.examples.len() < NAMED {
                self.examples.push(format!("{full_name}: {p}"));
            }
        }
    }

    pub fn merge(&mut self, other: Writable) {
        self.count += other.count;
        for e in other.examples {
            if self.examples.len() < NAMED {
                self.examples.push(e);
            }
        }
    }

    /// The `write-scope` notice of a token that sent no scopes header
    /// (a classic token's scopes decide for it).
    pub fn risk(&self) -> Option<RiskNotice> {
        (self.count > 0).then(|| RiskNotice {
            code: RiskCode::WriteScope,
            message: format!(
                "token reports write permissions on {} {} ({}{}); a fine-grained token with read-only Metadata permission is enough",
                self.count,
                if self.count == 1 { "repository" } else { "repositories" },
                self.examples.join(", "),
                if self.count > self.examples.len() as u64 { ", …" } else { "" },
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perms(v: serde_json::Value) -> Permissions {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn read_only_permissions_raise_nothing() {
        let mut w = Writable::default();
        w.note(
            "acme/a",
            Some(&perms(
                serde_json::json!({"admin": false, "push": false, "pull": true}),
            )),
        );
        w.note("acme/b", None);
        assert_eq!(w.risk(), None);
    }

    #[test]
    fn push_maintain_or_admin_is_a_write_risk() {
        let mut w = Writable::default();
        for (i, p) in ["push", "maintain", "admin", "push"].iter().enumerate() {
            w.note(
                &format!("acme/r{i}"),
                Some(&perms(serde_json::json!({ *p: true }))),
            );
        }
        let risk = w.risk().unwrap();
        assert_eq!(risk.code, "write-scope");
        assert!(
            risk.message.starts_with("token reports write permissions on 4 repositories (acme/r0: push, acme/r1: maintain, acme/r2: admin, …)"),
            "{}",
            risk.message
        );
    }
}
