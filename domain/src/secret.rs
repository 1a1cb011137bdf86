//! Secrets in memory: a token that cannot be printed, logged or serialised
//! by accident. The only way to its bytes is [`Token::expose`], which is easy
//! to grep for in review.

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

#[cfg(test)]
mod tests {
    use super::*;

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
