//! A connection's tenant comes from its configuration, never from an answer.
//!
//! Every address a connection writes is inside its tenant. If the tenant were
//! read from response bodies (a repository's `html_url` host), an upstream
//! could place its records in any tenant, and a GitHub Enterprise Server
//! reached by an internal name would have its listings and its webhook
//! re-reads disagree about where its spaces live. So:
//!
//! - GitHub: `https://api.github.com` is the tenant `github.com`;
//!   `https://api.NAME.ghe.com` (GHEC with data residency) is `NAME.ghe.com`;
//!   any other base (`https://HOST/api/v3`, a simulator) is its host, or the
//!   web host configured for it when people browse it under another name.
//!   Only `api.github.com` may claim `github.com`.
//! - Bitbucket: the uuid of the configured workspace; Jira: the cloudId of
//!   the configured site; Drive: the configured Workspace domain. Those are
//!   checked where they are read ([`crate::SpaceAddress::checked`]).

use crate::address::Platform;
use crate::error::{DomainError, Result};

/// The connection setting naming a GitHub Enterprise Server's web host when
/// it differs from its API host (`connection add github --web-host`).
pub const WEB_HOST_SETTING: &str = "web_host";

const GITHUB_API: &str = "api.github.com";
const GITHUB_WEB: &str = "github.com";

/// The tenant of a GitHub connection with API base `base_url` and, for an
/// Enterprise Server, the configured `web_host` (if any).
pub fn github_tenant(base_url: &str, web_host: Option<&str>) -> Result<String> {
    let invalid = |why: String| DomainError::InvalidTenant {
        platform: Platform::Github,
        given: base_url.to_owned(),
        why,
    };
    let api = url::Url::parse(base_url.trim())
        .map_err(|e| invalid(format!("the API base URL does not parse: {e}")))?;
    let api_host = api
        .host_str()
        .filter(|h| !h.is_empty())
        .map(str::to_ascii_lowercase)
        .ok_or_else(|| invalid("the API base URL has no host".to_owned()))?;
    let configured = web_host
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .map(host_of)
        .transpose()?;

    // Hosted GitHub: the web host is implied and cannot be moved elsewhere.
    let hosted = if api_host == GITHUB_API {
        Some(GITHUB_WEB.to_owned())
    } else {
        api_host
            .strip_prefix("api.")
            .filter(|rest| rest.ends_with(".ghe.com"))
            .map(str::to_owned)
    };
    if let Some(hosted) = hosted {
        return match configured {
            Some(w) if w != hosted => Err(invalid(format!(
                "{api_host} is browsed at {hosted}; a web host of {w} cannot be configured for it"
            ))),
            _ => Ok(hosted),
        };
    }
    let tenant = configured.unwrap_or(api_host);
    if tenant == GITHUB_WEB || tenant.ends_with(".github.com") || tenant.ends_with(".ghe.com") {
        return Err(invalid(format!(
            "only the API of {tenant} itself reads the tenant {tenant}; this base URL is an Enterprise Server, \
             configure its own web host"
        )));
    }
    Ok(tenant)
}

/// A configured web host: `ghe.example.com` (or a URL, of which the host is
/// kept), lower-case.
fn host_of(raw: &str) -> Result<String> {
    let invalid = |why: &str| DomainError::InvalidTenant {
        platform: Platform::Github,
        given: raw.to_owned(),
        why: why.to_owned(),
    };
    let parsed = if raw.contains("://") {
        url::Url::parse(raw)
    } else {
        url::Url::parse(&format!("https://{raw}"))
    }
    .map_err(|_| invalid("a web host is a host name like ghe.example.com"))?;
    if parsed.path() != "/" && !parsed.path().is_empty()
        || parsed.query().is_some()
        || parsed.port().is_some()
    {
        return Err(invalid(
            "a web host is a host name, without port, path or query",
        ));
    }
    parsed
        .host_str()
        .filter(|h| !h.is_empty())
        .map(str::to_ascii_lowercase)
        .ok_or_else(|| invalid("a web host is a host name like ghe.example.com"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosted_github_is_github_com() {
        assert_eq!(
            github_tenant("https://api.github.com", None).unwrap(),
            "github.com"
        );
        assert_eq!(
            github_tenant("https://API.GitHub.com/", Some("github.com")).unwrap(),
            "github.com"
        );
        assert_eq!(
            github_tenant("https://api.acme.ghe.com", None).unwrap(),
            "acme.ghe.com"
        );
        assert!(github_tenant("https://api.github.com", Some("ghe.example.com")).is_err());
    }

    #[test]
    fn an_enterprise_server_is_its_host_or_its_configured_web_host() {
        assert_eq!(
            github_tenant("https://GHE.example.com/api/v3", None).unwrap(),
            "ghe.example.com"
        );
        assert_eq!(
            github_tenant("http://10.0.0.7:8080/api/v3", Some("GHE.example.com")).unwrap(),
            "ghe.example.com"
        );
        assert_eq!(
            github_tenant("http://10.0.0.7/api/v3", Some("https://ghe.example.com/")).unwrap(),
            "ghe.example.com"
        );
        assert_eq!(
            github_tenant("http://127.0.0.1:4000", None).unwrap(),
            "127.0.0.1"
        );
        for bad in ["ghe.example.com/x", "ghe.example.com:8443", "a b"] {
            assert!(
                github_tenant("http://10.0.0.7/api/v3", Some(bad)).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn no_other_base_url_claims_github_com() {
        for (base, web) in [
            ("http://127.0.0.1:4000", Some("github.com")),
            ("https://github.com/api/v3", None),
            ("https://ghe.example.com/api/v3", Some("GitHub.com")),
            ("https://ghe.example.com/api/v3", Some("acme.ghe.com")),
            (
                "https://api.github.com.evil.example/api/v3",
                Some("www.github.com"),
            ),
        ] {
            let err = github_tenant(base, web).unwrap_err();
            assert!(
                matches!(err, DomainError::InvalidTenant { .. }),
                "{base} {web:?}: {err}"
            );
        }
        assert!(github_tenant("not a url", None).is_err());
    }
}
