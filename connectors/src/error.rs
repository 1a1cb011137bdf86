//! What can go wrong talking to a platform, translated once at the HTTP
//! boundary so that callers decide on the error type, never on status codes.
//!
//! The retry intent is carried by the variant: [`ConnectorError::is_retryable`]
//! says whether trying the same thing again later may succeed, and
//! [`ConnectorError::RateLimited`] carries the moment to try again. No variant
//! ever holds a credential: error strings are built from status lines, the
//! platform's own error message and URLs, none of which contain the token.

use chrono::{DateTime, Utc};
use cmcp_domain::Platform;

pub type Result<T, E = ConnectorError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum ConnectorError {
    /// 401: the credential is missing, expired or revoked.
    #[error("{platform}: credential rejected (401): {detail}")]
    Unauthorized { platform: Platform, detail: String },

    /// 403 that is not a rate limit: the credential lacks a permission, or
    /// the organisation blocks this kind of token.
    #[error(
        "{platform}: permission denied (403): {detail}{}",
        accepted_suffix(accepted_permissions)
    )]
    PermissionDenied {
        platform: Platform,
        detail: String,
        /// GitHub's `X-Accepted-GitHub-Permissions`: what the endpoint needs.
        accepted_permissions: Option<String>,
    },

    /// 404 on something that must exist (the organisation being listed).
    #[error("{platform}: not found: {what}")]
    NotFound { platform: Platform, what: String },

    /// The rate budget is spent and the wait is longer than the configured
    /// maximum (or retries ran out while waiting): reschedule at `retry_at`.
    #[error("{platform}: rate limited until {retry_at}")]
    RateLimited {
        platform: Platform,
        retry_at: DateTime<Utc>,
    },

    /// Any other unexpected HTTP status (5xx after retries, 410, 422, …).
    #[error("{platform}: HTTP {status}: {detail}")]
    Http {
        platform: Platform,
        status: u16,
        detail: String,
    },

    /// Connection refused or reset, timeout, body cut short.
    #[error("{platform}: transport error: {detail}")]
    Transport { platform: Platform, detail: String },

    /// The body was not the JSON we expected.
    #[error("{platform}: undecodable response: {detail}")]
    Decode { platform: Platform, detail: String },

    /// The connector was configured with something unusable (a base URL that
    /// is not http(s), a token that cannot go into a header, …).
    #[error("invalid connector configuration: {detail}")]
    InvalidConfig { detail: String },

    /// No connector exists for this platform yet.
    #[error("no connector for platform {platform} yet")]
    Unsupported { platform: Platform },

    /// `read` was given an address this connector cannot read (another
    /// platform, another host, or a kind without a read-by-id endpoint).
    #[error("{platform}: cannot read {address}: {why}")]
    UnsupportedAddress {
        platform: Platform,
        address: String,
        why: String,
    },

    /// A `Link` header pointed somewhere we refuse to follow (another origin,
    /// which would receive the credential, or a page already read).
    #[error("{platform}: refusing to follow pagination link {url}: {why}")]
    Pagination {
        platform: Platform,
        url: String,
        why: String,
    },

    /// The receiver of `list` records went away: nobody is listening.
    #[error("{platform}: the record sink was closed before the listing ended")]
    SinkClosed { platform: Platform },
}

fn accepted_suffix(accepted: &Option<String>) -> String {
    match accepted {
        Some(p) => format!(" (endpoint accepts permissions: {p})"),
        None => String::new(),
    }
}

impl ConnectorError {
    /// Whether the same request may succeed if tried again later (by the
    /// HTTP retry loop, or by rescheduling the job). Credential, permission,
    /// configuration and not-found errors never fix themselves.
    pub fn is_retryable(&self) -> bool {
        match self {
            ConnectorError::RateLimited { .. }
            | ConnectorError::Transport { .. }
            | ConnectorError::Decode { .. } => true,
            ConnectorError::Http { status, .. } => {
                *status >= 500 || *status == 429 || *status == 408
            }
            ConnectorError::Unauthorized { .. }
            | ConnectorError::PermissionDenied { .. }
            | ConnectorError::NotFound { .. }
            | ConnectorError::InvalidConfig { .. }
            | ConnectorError::Unsupported { .. }
            | ConnectorError::UnsupportedAddress { .. }
            | ConnectorError::Pagination { .. }
            | ConnectorError::SinkClosed { .. } => false,
        }
    }

    /// The platform this error came from, when there is one.
    pub fn platform(&self) -> Option<Platform> {
        match self {
            ConnectorError::Unauthorized { platform, .. }
            | ConnectorError::PermissionDenied { platform, .. }
            | ConnectorError::NotFound { platform, .. }
            | ConnectorError::RateLimited { platform, .. }
            | ConnectorError::Http { platform, .. }
            | ConnectorError::Transport { platform, .. }
            | ConnectorError::Decode { platform, .. }
            | ConnectorError::Unsupported { platform }
            | ConnectorError::UnsupportedAddress { platform, .. }
            | ConnectorError::Pagination { platform, .. }
            | ConnectorError::SinkClosed { platform } => Some(*platform),
            ConnectorError::InvalidConfig { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_intent_follows_the_variant() {
        let p = Platform::Github;
        let http = |status| ConnectorError::Http {
            platform: p,
            status,
            detail: String::new(),
        };
        assert!(http(500).is_retryable());
        assert!(http(503).is_retryable());
        assert!(http(429).is_retryable());
        assert!(!http(410).is_retryable());
        assert!(!http(422).is_retryable());
        assert!(
            ConnectorError::RateLimited {
                platform: p,
                retry_at: Utc::now()
            }
            .is_retryable()
        );
        assert!(
            !ConnectorError::Unauthorized {
                platform: p,
                detail: "Bad credentials".into()
            }
            .is_retryable()
        );
    }

    #[test]
    fn permission_denied_names_what_the_endpoint_accepts() {
        let e = ConnectorError::PermissionDenied {
            platform: Platform::Github,
            detail: "Resource not accessible by personal access token".into(),
            accepted_permissions: Some("metadata=read".into()),
        };
        let s = e.to_string();
        assert!(s.contains("metadata=read"), "{s}");
        assert!(s.starts_with("github: permission denied (403)"), "{s}");
    }
}
