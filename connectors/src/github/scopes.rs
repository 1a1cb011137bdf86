//! Classic-token scope check: does the credential grant more than reading?
//!
//! A classic PAT or OAuth token announces its scopes in `X-OAuth-Scopes`
//! (fine-grained and App tokens send no such header). No classic scope is
//! read-only for private repositories — `repo` is full read *and write* — so
//! a classic token that lists private repos is always over-privileged. The
//! fleet never refuses such a token; it raises a risk notice for the ADMIN.
//!
//! The check is an allow-list of read-only scopes, not a deny-list of write
//! ones: a scope GitHub adds tomorrow is reported until someone confirms it
//! is harmless, which is the safe direction for a notice.

use cmcp_domain::{RiskCode, RiskNotice};
use reqwest::header::HeaderMap;

pub const SCOPES_HEADER: &str = "x-oauth-scopes";

/// Scopes that only read. Everything else — `repo`, `public_repo`,
/// `workflow`, `gist`, `notifications`, `user`, `project`, `codespace`,
/// `delete_repo`, any `admin:`/`write:`/`delete:` scope, unknown ones — is
/// treated as granting write access.
fn is_read_only(scope: &str) -> bool {
    scope.starts_with("read:") || matches!(scope, "user:email")
}

/// The scope list of the `X-OAuth-Scopes` header; `None` when the header is
/// absent (not a classic token). A present but empty header is a classic
/// token without scopes: `Some(vec![])`.
pub fn scopes(headers: &HeaderMap) -> Option<Vec<String>> {
    let raw = headers.get(SCOPES_HEADER)?.to_str().ok()?;
    Some(
        raw.split(',')
            .map(|s| s.trim().to_ascii_lowercase())
            .filter(|s| !s.is_empty())
            .collect(),
    )
}

/// The scopes among `scopes` that grant more than reading, in their order.
pub fn write_scopes(scopes: &[String]) -> Vec<&str> {
    scopes
        .iter()
        .map(String::as_str)
        .filter(|s| !is_read_only(s))
        .collect()
}

/// The `write-scope` notice, when the classic token's scopes grant write.
pub fn write_scope_risk(scopes: &[String]) -> Option<RiskNotice> {
    let writes = write_scopes(scopes);
    (!writes.is_empty()).then(|| RiskNotice {
        code: RiskCode::WriteScope,
        message: format!(
            "classic token grants write access (scopes: {}); a fine-grained token with read-only Metadata permission is enough",
            writes.join(", ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn header(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(SCOPES_HEADER, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn repo_scope_is_a_write_risk() {
        let s = scopes(&header("repo, read:org")).unwrap();
        let risk = write_scope_risk(&s).unwrap();
        assert_eq!(risk.code, "write-scope");
        assert!(risk.message.contains("(scopes: repo)"), "{}", risk.message);
    }

    #[test]
    fn read_only_scopes_raise_nothing() {
        for v in ["read:org", "read:org, read:user, user:email", "", "  "] {
            let s = scopes(&header(v)).unwrap();
            assert_eq!(write_scope_risk(&s), None, "{v:?}");
        }
    }

    #[test]
    fn no_header_means_not_a_classic_token() {
        assert_eq!(scopes(&HeaderMap::new()), None);
    }

    #[test]
    fn the_recorded_real_scope_list_is_all_write_but_none() {
        // X-OAuth-Scopes of the recorded rename-repository scenario.
        let s = scopes(&header(
            "admin:gpg_key, admin:org, admin:org_hook, admin:public_key, admin:repo_hook, delete_repo, gist, notifications, repo, user, workflow",
        ))
        .unwrap();
        assert_eq!(write_scopes(&s).len(), 11);
    }

    #[test]
    fn every_documented_write_scope_counts() {
        for scope in [
            "repo",
            "public_repo",
            "repo:status",
            "repo_deployment",
            "repo:invite",
            "security_events",
            "admin:org",
            "write:org",
            "admin:repo_hook",
            "write:repo_hook",
            "admin:org_hook",
            "delete_repo",
            "workflow",
            "write:packages",
            "delete:packages",
            "admin:enterprise",
            "admin:public_key",
            "admin:gpg_key",
            "admin:ssh_signing_key",
            "user",
            "user:follow",
            "project",
            "write:discussion",
            "codespace",
            "gist",
            "notifications",
            "some_future_scope",
        ] {
            assert_eq!(write_scopes(&[scope.to_owned()]), [scope], "{scope}");
        }
        for scope in [
            "read:org",
            "read:user",
            "read:packages",
            "read:discussion",
            "read:project",
            "read:public_key",
            "read:repo_hook",
            "read:gpg_key",
            "read:enterprise",
            "read:audit_log",
            "user:email",
        ] {
            assert!(write_scopes(&[scope.to_owned()]).is_empty(), "{scope}");
        }
    }
}
