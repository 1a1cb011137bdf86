//! Google service-account authentication with domain-wide delegation.
//!
//! The connection's secret is the service account's JSON key. To act as the
//! impersonated Workspace admin, we sign a JWT (RS256) with the key —
//! `iss` = the account's `client_email`, `sub` = the admin, `scope` =
//! `drive.readonly`, `aud` = the token endpoint, one hour of validity — and
//! POST it to the token endpoint as a `jwt-bearer` grant. The answer is a
//! short-lived access token, used as `Bearer` and refreshed before it ends.
//!
//! Why sign ourselves with `ring`: it is already in the tree (rustls), and a
//! whole OAuth crate would bring a second HTTP stack. The POST to the token
//! endpoint is the one non-GET request the fleet sends; it goes to the OAuth
//! server, never to the catalogue.
//!
//! The private key never leaves this module: it is parsed into a ring key
//! pair at construction and no type here prints it.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use cmcp_domain::{Platform, Token};
use ring::rand::SystemRandom;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use serde::Deserialize;
use url::Url;

use super::model::{ErrorEnvelope, TokenInfo, TokenResponse};
use crate::common::config::HttpConfig;
use crate::common::http::error_chain;
use crate::error::{ConnectorError, Result};

const PLATFORM: Platform = Platform::Drive;
/// What the catalogue asks for: read-only, and enough for `drives.list`
/// (which `drive.metadata.readonly` cannot call).
pub const DRIVE_READONLY: &str = "https://www.googleapis.com/auth/drive.readonly";
pub const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// Longest validity Google accepts for the assertion.
const ASSERTION_LIFETIME_SECS: i64 = 3600;

/// The fields of a service-account JSON key the fleet uses.
#[derive(Deserialize)]
struct KeyFile {
    client_email: String,
    private_key: String,
    #[serde(default)]
    token_uri: Option<String>,
}

/// A parsed service-account key: who signs, and the signing key.
pub struct ServiceAccount {
    client_email: String,
    token_uri: Option<String>,
    key: RsaKeyPair,
}

impl std::fmt::Debug for ServiceAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccount")
            .field("client_email", &self.client_email)
            .field("private_key", &"[redacted]")
            .finish()
    }
}

fn invalid(detail: &str) -> ConnectorError {
    ConnectorError::InvalidConfig {
        detail: format!("Drive service-account key: {detail}"),
    }
}

impl ServiceAccount {
    /// Parses the JSON key held by the connection's token. Errors never
    /// quote the key.
    pub fn from_token(token: &Token) -> Result<ServiceAccount> {
        let file: KeyFile = serde_json::from_str(token.expose())
            .map_err(|_| invalid("not a service-account JSON key (client_email, private_key)"))?;
        let der = pem_to_der(&file.private_key)
            .ok_or_else(|| invalid("private_key is not a PEM block"))?;
        let key = RsaKeyPair::from_pkcs8(&der)
            .map_err(|_| invalid("private_key is not a PKCS#8 RSA key"))?;
        if file.client_email.trim().is_empty() {
            return Err(invalid("client_email is empty"));
        }
        Ok(ServiceAccount {
            client_email: file.client_email.trim().to_owned(),
            token_uri: file.token_uri.filter(|u| !u.trim().is_empty()),
            key,
        })
    }

    pub fn client_email(&self) -> &str {
        &self.client_email
    }

    pub fn token_uri(&self) -> Option<&str> {
        self.token_uri.as_deref()
    }

    /// The signed assertion `header.claims.signature` (base64url, RS256).
    pub fn assertion(
        &self,
        subject: &str,
        scope: &str,
        audience: &str,
        now: i64,
    ) -> Result<String> {
        let header = serde_json::json!({"alg": "RS256", "typ": "JWT"});
        let claims = serde_json::json!({
            "iss": self.client_email,
            "sub": subject,
            "scope": scope,
            "aud": audience,
            "iat": now,
            "exp": now + ASSERTION_LIFETIME_SECS,
        });
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let mut signature = vec![0u8; self.key.public().modulus_len()];
        self.key
            .sign(
                &RSA_PKCS1_SHA256,
                &SystemRandom::new(),
                signing_input.as_bytes(),
                &mut signature,
            )
            .map_err(|_| invalid("signing the assertion failed"))?;
        Ok(format!(
            "{signing_input}.{}",
            URL_SAFE_NO_PAD.encode(signature)
        ))
    }
}

/// The DER bytes of the first PEM block in `pem`.
fn pem_to_der(pem: &str) -> Option<Vec<u8>> {
    let body: String = pem
        .lines()
        .map(str::trim)
        .skip_while(|l| !l.starts_with("-----BEGIN"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    STANDARD.decode(body).ok().filter(|d| !d.is_empty())
}

/// An access token and how long it is good for.
pub struct AccessToken {
    pub token: Token,
    pub lifetime: Duration,
}

/// Exchanges signed assertions for access tokens at one endpoint.
pub struct TokenSource {
    account: ServiceAccount,
    subject: String,
    endpoint: Url,
    client: reqwest::Client,
    cfg: HttpConfig,
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSource")
            .field("account", &self.account)
            .field("subject", &self.subject)
            .field("endpoint", &self.endpoint.as_str())
            .finish_non_exhaustive()
    }
}

impl TokenSource {
    /// `endpoint`: the configured token URL, else the key's `token_uri`.
    pub fn new(
        account: ServiceAccount,
        subject: &str,
        endpoint: Option<&str>,
        cfg: HttpConfig,
    ) -> Result<TokenSource> {
        let subject = subject.trim();
        if subject.is_empty() || !subject.contains('@') {
            return Err(ConnectorError::InvalidConfig {
                detail: format!(
                    "Drive: the impersonated admin {subject:?} is not an email address"
                ),
            });
        }
        let raw = endpoint
            .or(account.token_uri())
            .unwrap_or("https://oauth2.googleapis.com/token")
            .trim()
            .to_owned();
        let endpoint = Url::parse(&raw)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https"))
            .ok_or_else(|| ConnectorError::InvalidConfig {
                detail: format!("Drive token URL {raw:?} is not an http(s) URL"),
            })?;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .user_agent(cfg.user_agent.clone())
            .timeout(cfg.timeout)
            .build()
            .map_err(|e| ConnectorError::InvalidConfig {
                detail: format!("cannot build the HTTP client: {}", error_chain(&e)),
            })?;
        Ok(TokenSource {
            account,
            subject: subject.to_owned(),
            endpoint,
            client,
            cfg,
        })
    }

    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// A fresh access token. Transport errors and 5xx are retried with the
    /// configured backoff; a 4xx (bad key, delegation not granted) is a
    /// credential problem and returned as `Unauthorized` at once.
    pub async fn fetch(&self) -> Result<AccessToken> {
        let mut delay = self.cfg.backoff_min;
        let mut last = None;
        for attempt in 1..=self.cfg.max_attempts {
            if attempt > 1 {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(self.cfg.backoff_max);
            }
            match self.try_fetch().await {
                Ok(t) => return Ok(t),
                Err(e) if e.is_retryable() => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or(ConnectorError::Transport {
            platform: PLATFORM,
            detail: "token endpoint: no attempt made".into(),
        }))
    }

    async fn try_fetch(&self) -> Result<AccessToken> {
        let now = chrono::Utc::now().timestamp();
        let assertion =
            self.account
                .assertion(&self.subject, DRIVE_READONLY, self.endpoint.as_str(), now)?;
        let form = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", JWT_BEARER)
            .append_pair("assertion", &assertion)
            .finish();
        let resp = self
            .client
            .post(self.endpoint.clone())
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(form)
            .send()
            .await
            .map_err(|e| ConnectorError::Transport {
                platform: PLATFORM,
                detail: format!("token endpoint: {}", error_chain(&e)),
            })?;
        let status = resp.status();
        let body = resp.bytes().await.map_err(|e| ConnectorError::Transport {
            platform: PLATFORM,
            detail: format!("token endpoint: {}", error_chain(&e)),
        })?;
        if status.is_success() {
            let t: TokenResponse =
                serde_json::from_slice(&body).map_err(|e| ConnectorError::Decode {
                    platform: PLATFORM,
                    detail: format!("token endpoint: {e}"),
                })?;
            return Ok(AccessToken {
                token: Token::new(t.access_token),
                lifetime: Duration::from_secs(t.expires_in.unwrap_or(3600)),
            });
        }
        let detail = oauth_error(&body);
        if status.is_server_error() || status.as_u16() == 429 || status.as_u16() == 408 {
            return Err(ConnectorError::Http {
                platform: PLATFORM,
                status: status.as_u16(),
                detail: format!("token endpoint: {detail}"),
            });
        }
        Err(ConnectorError::Unauthorized {
            platform: PLATFORM,
            detail: format!(
                "token endpoint refused the service account {} acting as {}: {detail}",
                self.account.client_email(),
                self.subject
            ),
        })
    }
}

impl TokenSource {
    /// What `access` was granted, from the tokeninfo endpoint. The token
    /// goes in a POST body, never in a URL: URLs end up in logs and errors.
    pub async fn token_info(&self, url: &Url, access: &Token) -> Result<TokenInfo> {
        let form = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("access_token", access.expose())
            .finish();
        let transport = |e: reqwest::Error| ConnectorError::Transport {
            platform: PLATFORM,
            detail: format!("tokeninfo: {}", error_chain(&e.without_url())),
        };
        let resp = self
            .client
            .post(url.clone())
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(form)
            .send()
            .await
            .map_err(transport)?;
        let status = resp.status();
        let body = resp.bytes().await.map_err(transport)?;
        if !status.is_success() {
            return Err(ConnectorError::Http {
                platform: PLATFORM,
                status: status.as_u16(),
                detail: format!("tokeninfo: {}", oauth_error(&body)),
            });
        }
        serde_json::from_slice(&body).map_err(|e| ConnectorError::Decode {
            platform: PLATFORM,
            detail: format!("tokeninfo: {e}"),
        })
    }
}

/// `error: error_description` of an OAuth error answer (never the request).
fn oauth_error(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct OAuthError {
        error: String,
        #[serde(default)]
        error_description: Option<String>,
    }
    if let Ok(e) = serde_json::from_slice::<OAuthError>(body) {
        return match e.error_description {
            Some(d) => format!("{}: {d}", e.error),
            None => e.error,
        };
    }
    if let Ok(e) = serde_json::from_slice::<ErrorEnvelope>(body) {
        return e.error.message;
    }
    String::from_utf8_lossy(body).chars().take(200).collect()
}

/// Scopes that only read. Anything else granted to the delegation (e.g.
/// `…/auth/drive`) can write and is reported as a risk.
pub const READ_ONLY_SCOPES: [&str; 5] = [
    "https://www.googleapis.com/auth/drive.readonly",
    "https://www.googleapis.com/auth/drive.metadata.readonly",
    "https://www.googleapis.com/auth/drive.photos.readonly",
    "https://www.googleapis.com/auth/drive.activity.readonly",
    "https://www.googleapis.com/auth/drive.meet.readonly",
];

/// The granted scopes (space separated, as tokeninfo gives them) that are
/// not read-only, if any.
pub fn write_scopes(granted: &str) -> Vec<String> {
    granted
        .split_whitespace()
        .filter(|s| !READ_ONLY_SCOPES.contains(s) && !s.ends_with(".readonly"))
        .filter(|s| !matches!(*s, "openid" | "email" | "profile"))
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::{RSA_PKCS1_2048_8192_SHA256, UnparsedPublicKey};

    const KEY: &str = include_str!("../../../fixtures/data/drive/test-service-account.json");
    const PUBLIC_DER: &[u8] =
        include_bytes!("../../../fixtures/data/drive/test-service-account.public.der");

    #[test]
    fn assertion_is_an_rs256_jwt_with_the_delegation_claims() {
        let sa = ServiceAccount::from_token(&Token::new(KEY)).unwrap();
        let jwt = sa
            .assertion(
                "admin@example.com",
                DRIVE_READONLY,
                "https://t.example/token",
                1_000,
            )
            .unwrap();
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let header: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).unwrap()).unwrap();
        assert_eq!(header["alg"], "RS256");
        let claims: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
        assert_eq!(claims["iss"], sa.client_email());
        assert_eq!(claims["sub"], "admin@example.com");
        assert_eq!(claims["scope"], DRIVE_READONLY);
        assert_eq!(claims["aud"], "https://t.example/token");
        assert_eq!(claims["exp"].as_i64(), Some(4_600));
        let sig = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
        let public = UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, PUBLIC_DER);
        public
            .verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &sig)
            .unwrap();
        // A changed claim no longer verifies.
        assert!(
            public
                .verify(format!("{}.{}x", parts[0], parts[1]).as_bytes(), &sig)
                .is_err()
        );
    }

    #[test]
    fn bad_keys_are_config_errors_that_never_quote_the_key() {
        for bad in [
            "not json",
            r#"{"client_email":"a@b","private_key":"nope"}"#,
            r#"{"client_email":"a@b","private_key":"-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----"}"#,
        ] {
            let e = ServiceAccount::from_token(&Token::new(bad)).unwrap_err();
            assert!(matches!(e, ConnectorError::InvalidConfig { .. }), "{e}");
            assert!(!e.to_string().contains("c2VjcmV0"));
        }
        let sa = ServiceAccount::from_token(&Token::new(KEY)).unwrap();
        assert!(!format!("{sa:?}").contains("PRIVATE"));
    }

    #[test]
    fn write_scopes_are_everything_but_the_read_only_ones() {
        assert!(write_scopes(DRIVE_READONLY).is_empty());
        assert!(
            write_scopes(
                "https://www.googleapis.com/auth/drive.metadata.readonly https://www.googleapis.com/auth/drive.photos.readonly"
            )
            .is_empty()
        );
        assert_eq!(
            write_scopes(
                "https://www.googleapis.com/auth/drive.readonly https://www.googleapis.com/auth/drive"
            ),
            ["https://www.googleapis.com/auth/drive"]
        );
        assert_eq!(
            write_scopes("https://www.googleapis.com/auth/drive.file"),
            ["https://www.googleapis.com/auth/drive.file"]
        );
    }

    #[test]
    fn the_subject_must_be_an_email() {
        let sa = ServiceAccount::from_token(&Token::new(KEY)).unwrap();
        assert!(TokenSource::new(sa, "admin", None, HttpConfig::default()).is_err());
    }
}
