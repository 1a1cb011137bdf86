//! What can go wrong talking to a platform, translated once at the HTTP
//! boundary so that callers decide on the error type, never on status codes.
//!
//! The retry intent is carried by the variant and decided here, once:
//! [`ConnectorError::intent`] says whether trying again later may succeed
//! ([`RetryIntent::Transient`]), when the platform allows it
//! ([`RetryIntent::RetryAfter`], from [`ConnectorError::RateLimited`]), or
//! that nothing but an operator fixes it ([`RetryIntent::Permanent`]). No variant
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

/// What a failure means for trying again. Decided by the error's owner
/// ([`ConnectorError::intent`]); the worker only obeys it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryIntent {
    /// Nothing changes by waiting: a rejected credential, a missing
    /// permission, a container that does not exist, a bad configuration.
    Permanent,
    /// The platform asked not to be called before then.
    RetryAfter(DateTime<Utc>),
    /// It may pass with time (a 5xx, a dropped connection, a short body):
    /// retry with backoff.
    Transient,
}

impl RetryIntent {
    pub fn is_permanent(self) -> bool {
        self == RetryIntent::Permanent
    }
}

fn accepted_suffix(accepted: &Option<String>) -> String {
    match accepted {
        Some(p) => format!(" (endpoint accepts permissions: {p})"),
        None => String::new(),
    }
}

impl ConnectorError {
    /// What trying again would do (by the HTTP retry loop, or by
    /// rescheduling the job). Credential, permission, configuration and
    /// not-found errors never fix themselves.
    pub fn intent(&self) -> RetryIntent {
        match self {
            ConnectorError::RateLimited { retry_at, .. } => RetryIntent::RetryAfter(*retry_at),
            ConnectorError::Transport { .. } | ConnectorError::Decode { .. } => {
                RetryIntent::Transient
            }
            ConnectorError::Http { status, .. }
                if *status >= 500 || *status == 429 || *status == 408 =>
            {
                RetryIntent::Transient
            }
            ConnectorError::Http { .. }
            | ConnectorError::Unauthorized { .. }
            | ConnectorError::PermissionDenied { .. }
            | ConnectorError::NotFound { .. }
            | ConnectorError::InvalidConfig { .. }
            | ConnectorError::Unsupported { .. }
            | ConnectorError::UnsupportedAddress { .. }
            | ConnectorError::Pagination { .. }
            | ConnectorError::SinkClosed { .. } => RetryIntent::Permanent,
        }
    }

    /// Whether the same request may succeed if tried again later.
    pub fn is_retryable(&self) -> bool {
        !self.is_permanent()
    }

    /// Whether only an operator can fix this (see [`ConnectorError::intent`]).
    pub fn is_permanent(&self) -> bool {
        self.intent().is_permanent()
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
    fn credential_permission_and_missing_container_are_permanent() {
        let p = Platform::Bitbucket;
        let permanent = [
            ConnectorError::Unauthorized {
                platform: p,
                detail: String::new(),
            },
            ConnectorError::PermissionDenied {
                platform: p,
                detail: String::new(),
                accepted_permissions: None,
            },
            ConnectorError::NotFound {
                platform: p,
                what: "workspace acme".into(),
            },
        ];
        for e in &permanent {
            assert_eq!(e.intent(), RetryIntent::Permanent, "{e}");
            assert!(e.is_permanent());
        }
        let at = Utc::now();
        assert_eq!(
            ConnectorError::RateLimited {
                platform: p,
                retry_at: at
            }
            .intent(),
            RetryIntent::RetryAfter(at)
        );
        let unavailable = ConnectorError::Http {
            platform: p,
            status: 503,
            detail: String::new(),
        };
        assert_eq!(unavailable.intent(), RetryIntent::Transient);
        assert!(!unavailable.is_permanent());
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
