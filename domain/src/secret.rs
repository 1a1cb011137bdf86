//! Secrets in memory: a token that cannot be printed, logged or serialised
//! by accident. The only way to its bytes is [`Token::expose`], which is easy
//! to grep for in review. A [`Credential`] is the structured reading of a
//! token whose text says how it is sent (`bearer:…`, `basic:…`).

use std::fmt;

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

#[derive(Clone)]
pub struct Token(SecretString);

impl Token {
    pub fn new(value: impl Into<String>) -> Token {
        Token(SecretString::from(value.into()))
    }

    /// The token's text, for the one place that must send it (an HTTP
    /// header, the cipher). Never format or log the result.
    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }

    pub fn is_empty(&self) -> bool {
        self.0.expose_secret().is_empty()
    }
}

const REDACTED: &str = "[redacted]";

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({REDACTED})")
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

/// Serialising a token writes the redaction marker, never the token: a
/// config dump or a JSON answer cannot leak it.
impl Serialize for Token {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(REDACTED)
    }
}

impl<'de> Deserialize<'de> for Token {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Token::new)
    }
}

/// A credential as a connection stores it: one secret text whose prefix
/// says how it is sent. Written by [`Credential::to_token`] and read by
/// [`Credential::from_token`], nowhere else.
///
/// - `bearer:<token>`: an access token, sent as `Authorization: Bearer`.
/// - `basic:<user>:<secret>`: Basic auth (an Atlassian API token, with the
///   account e-mail as the user name).
///
/// `Debug` and `Display` never show the secret.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    Bearer(String),
    Basic { user: String, secret: String },
}

/// Why a text is not a credential. The messages complete "the <platform>
/// credential …".
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error("is empty")]
    Empty,
    #[error("has an empty access token after `bearer:`")]
    EmptyBearer,
    #[error("must be `basic:<email>:<token>` (no `:` after the e-mail)")]
    NoSecret,
    #[error("has an empty e-mail or token")]
    EmptyPart,
}

const BEARER: &str = "bearer:";
const BASIC: &str = "basic:";

impl Credential {
    /// Reads `bearer:<token>` or `basic:<user>:<secret>`; a text without a
    /// known prefix is `None`, so each platform decides what it means.
    pub fn from_token(token: &Token) -> Result<Option<Credential>, CredentialError> {
        let text = token.expose().trim();
        if text.is_empty() {
            return Err(CredentialError::Empty);
        }
        if let Some(rest) = text.strip_prefix(BEARER) {
            let rest = rest.trim();
            if rest.is_empty() {
                return Err(CredentialError::EmptyBearer);
            }
            return Ok(Some(Credential::Bearer(rest.to_owned())));
        }
        if let Some(rest) = text.strip_prefix(BASIC) {
            let (user, secret) = rest.split_once(':').ok_or(CredentialError::NoSecret)?;
            if user.trim().is_empty() || secret.trim().is_empty() {
                return Err(CredentialError::EmptyPart);
            }
            return Ok(Some(Credential::Basic {
                user: user.trim().to_owned(),
                secret: secret.trim().to_owned(),
            }));
        }
        Ok(None)
    }

    /// The text a connection stores for this credential.
    pub fn to_token(&self) -> Token {
        Token::new(match self {
            Credential::Bearer(t) => format!("{BEARER}{t}"),
            Credential::Basic { user, secret } => format!("{BASIC}{user}:{secret}"),
        })
    }
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credential::Bearer(_) => write!(f, "Bearer({REDACTED})"),
            Credential::Basic { user, .. } => write!(f, "Basic({user}:{REDACTED})"),
        }
    }
}

impl fmt::Display for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_round_trips_through_its_token_and_never_prints_the_secret() {
        for c in [
            Credential::Bearer("at-1".into()),
            Credential::Basic {
                user: "me@acme.com".into(),
                secret: "s3cret".into(),
            },
        ] {
            assert_eq!(Credential::from_token(&c.to_token()), Ok(Some(c.clone())));
            for shown in [format!("{c}"), format!("{c:?}")] {
                assert!(
                    !shown.contains("s3cret") && !shown.contains("at-1"),
                    "{shown}"
                );
            }
        }
        assert_eq!(
            Credential::Basic {
                user: "me@acme.com".into(),
                secret: "s3cret".into()
            }
            .to_token()
            .expose(),
            "basic:me@acme.com:s3cret"
        );
        assert_eq!(Credential::from_token(&Token::new("plain")), Ok(None));
        for (bad, why) in [
            ("", CredentialError::Empty),
            ("bearer:", CredentialError::EmptyBearer),
            ("basic:me", CredentialError::NoSecret),
            ("basic::x", CredentialError::EmptyPart),
            ("basic:me@x:", CredentialError::EmptyPart),
        ] {
            assert_eq!(
                Credential::from_token(&Token::new(bad)),
                Err(why),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn token_redacts_itself_everywhere() {
        let t = Token::new("ghp_supersecret123");
        assert_eq!(format!("{t}"), "[redacted]");
        assert_eq!(format!("{t:?}"), "Token([redacted])");
        assert_eq!(serde_json::to_string(&t).unwrap(), "\"[redacted]\"");
        assert_eq!(t.expose(), "ghp_supersecret123");
        let back: Token = serde_json::from_str("\"abc\"").unwrap();
        assert_eq!(back.expose(), "abc");
    }
}
