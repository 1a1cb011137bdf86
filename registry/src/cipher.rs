//! Secrets at rest. Connection tokens (and, later, webhook secrets) are
//! sealed with XChaCha20-Poly1305 under one master key before they reach the
//! database. The 192-bit nonce is random per seal, so no nonce bookkeeping is
//! needed, and each sealed value is bound to the row it belongs to through
//! the associated data: a ciphertext copied onto another connection does not
//! open.
//!
//! The master key comes from `CMCP_DISCOVERY_MASTER_KEY` (base64 or hex, 32
//! bytes) or, on the embedded default, from a key file in the data directory,
//! created with mode 0600 together with a new database and never otherwise:
//! a missing key file beside an existing database means the key that sealed
//! its secrets is gone, and making a new one would only hide that.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use chacha20poly1305::aead::{Aead, Generate, KeyInit, Payload};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};
use cmcp_domain::Token;

use crate::error::{RegistryError, Result};

pub const MASTER_KEY_ENV: &str = "CMCP_DISCOVERY_MASTER_KEY";
const VERSION: u8 = 1;
const NONCE_LEN: usize = 24;

/// Where the master key came from, so an error can say what to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// The `CMCP_DISCOVERY_MASTER_KEY` environment variable.
    Env,
    /// A key file.
    File(PathBuf),
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::Env => write!(f, "the environment variable {MASTER_KEY_ENV}"),
            KeySource::File(p) => write!(f, "the key file {}", p.display()),
        }
    }
}

/// What [`Cipher::load`] does when neither the variable nor the key file
/// gives a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingKey {
    /// Create the key file: only for a new database.
    Create,
    /// Fail, naming the key file: the database exists and its key is gone.
    Refuse,
}

#[derive(Clone)]
pub struct Cipher {
    aead: XChaCha20Poly1305,
}

impl fmt::Debug for Cipher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Cipher([redacted])")
    }
}

impl Cipher {
    pub fn from_key_bytes(bytes: &[u8]) -> Result<Cipher> {
        let aead = XChaCha20Poly1305::new_from_slice(bytes).map_err(|_| {
            RegistryError::Cipher(format!("master key must be 32 bytes, got {}", bytes.len()))
        })?;
        Ok(Cipher { aead })
    }

    /// Parse a key given as base64 or hex text.
    pub fn from_key_text(text: &str) -> Result<Cipher> {
        let text = text.trim();
        let bytes = if text.len() == 64 && text.chars().all(|c| c.is_ascii_hexdigit()) {
            hex::decode(text).map_err(|e| RegistryError::Cipher(format!("master key hex: {e}")))?
        } else {
            B64.decode(text).map_err(|e| {
                RegistryError::Cipher(format!("master key is neither hex nor base64: {e}"))
            })?
        };
        Cipher::from_key_bytes(&bytes)
    }

    /// The key from the environment if set, else from `key_file`; when
    /// neither exists, `missing` decides. Says where the key came from.
    pub fn load(
        env_value: Option<&str>,
        key_file: &Path,
        missing: MissingKey,
    ) -> Result<(Cipher, KeySource)> {
        if let Some(v) = env_value.filter(|v| !v.trim().is_empty()) {
            return Ok((Cipher::from_key_text(v)?, KeySource::Env));
        }
        let cipher = match std::fs::read_to_string(key_file) {
            Ok(text) => {
                check_private(key_file)?;
                Cipher::from_key_text(&text).map_err(|e| {
                    RegistryError::Cipher(format!("key file {}: {e}", key_file.display()))
                })?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match missing {
                MissingKey::Create => create_key_file(key_file)?,
                MissingKey::Refuse => {
                    return Err(RegistryError::Cipher(format!(
                        "the master key file {} is missing, but the registry already exists: \
                         its secrets were sealed with that key. Restore the file, or set \
                         {MASTER_KEY_ENV} to the key",
                        key_file.display()
                    )));
                }
            },
            Err(e) => {
                return Err(RegistryError::Cipher(format!(
                    "cannot read key file {}: {e}",
                    key_file.display()
                )));
            }
        };
        Ok((cipher, KeySource::File(key_file.to_owned())))
    }

    pub fn generate_key_text() -> String {
        let key = Key::generate();
        B64.encode(key.as_slice())
    }

    /// Seal `plaintext`, binding it to `context` (e.g. the connection id).
    pub fn seal(&self, plaintext: &[u8], context: &str) -> Result<Vec<u8>> {
        let nonce = XNonce::generate();
        let sealed = self
            .aead
            .encrypt(
                &nonce,
                Payload {
                    msg: plaintext,
                    aad: context.as_bytes(),
                },
            )
            .map_err(|_| RegistryError::Cipher("encryption failed".to_owned()))?;
        let mut out = Vec::with_capacity(1 + NONCE_LEN + sealed.len());
        out.push(VERSION);
        out.extend_from_slice(nonce.as_slice());
        out.extend_from_slice(&sealed);
        Ok(out)
    }

    pub fn open(&self, blob: &[u8], context: &str) -> Result<Vec<u8>> {
        if blob.len() < 1 + NONCE_LEN || blob[0] != VERSION {
            return Err(RegistryError::Cipher(
                "sealed value has an unknown format".to_owned(),
            ));
        }
        let nonce = XNonce::try_from(&blob[1..1 + NONCE_LEN])
            .map_err(|_| RegistryError::Cipher("sealed value has a bad nonce".to_owned()))?;
        self.aead
            .decrypt(
                &nonce,
                Payload {
                    msg: &blob[1 + NONCE_LEN..],
                    aad: context.as_bytes(),
                },
            )
            .map_err(|_| {
                RegistryError::Cipher(
                    "sealed value does not open: wrong master key, or it was tampered with"
                        .to_owned(),
                )
            })
    }

    pub fn seal_token(&self, token: &Token, context: &str) -> Result<Vec<u8>> {
        self.seal(token.expose().as_bytes(), context)
    }

    pub fn open_token(&self, blob: &[u8], context: &str) -> Result<Token> {
        let bytes = self.open(blob, context)?;
        let text = String::from_utf8(bytes)
            .map_err(|_| RegistryError::Cipher("token is not UTF-8".to_owned()))?;
        Ok(Token::new(text))
    }
}

fn create_key_file(path: &Path) -> Result<Cipher> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| RegistryError::Cipher(format!("cannot create {}: {e}", dir.display())))?;
    }
    let text = Cipher::generate_key_text();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path).map_err(|e| {
        RegistryError::Cipher(format!("cannot create key file {}: {e}", path.display()))
    })?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| {
            RegistryError::Cipher(format!("cannot write key file {}: {e}", path.display()))
        })?;
    tracing::info!(path = %path.display(), "created a new master key file (mode 0600); back it up with the database");
    Cipher::from_key_text(&text)
}

/// A key file readable by others is refused: the key opens every token.
fn check_private(path: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .map_err(|e| RegistryError::Cipher(format!("cannot stat {}: {e}", path.display())))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(RegistryError::Cipher(format!(
                "key file {} is readable by group or others (mode {:o}); run: chmod 600 {}",
                path.display(),
                mode & 0o777,
                path.display()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_open_roundtrip_and_context_binding() {
        let c = Cipher::from_key_text(&Cipher::generate_key_text()).unwrap();
        let blob = c.seal(b"ghp_abc", "connection:a").unwrap();
        assert!(!blob.windows(7).any(|w| w == b"ghp_abc"));
        assert_eq!(c.open(&blob, "connection:a").unwrap(), b"ghp_abc");
        assert!(c.open(&blob, "connection:b").is_err());
        let mut tampered = blob.clone();
        *tampered.last_mut().unwrap() ^= 1;
        assert!(c.open(&tampered, "connection:a").is_err());
        let other = Cipher::from_key_text(&Cipher::generate_key_text()).unwrap();
        assert!(other.open(&blob, "connection:a").is_err());
    }

    #[test]
    fn key_file_is_created_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/master.key");
        let (a, source) = Cipher::load(None, &path, MissingKey::Create).unwrap();
        assert_eq!(source, KeySource::File(path.clone()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let (b, _) = Cipher::load(None, &path, MissingKey::Refuse).unwrap();
        let blob = a.seal(b"x", "c").unwrap();
        assert_eq!(b.open(&blob, "c").unwrap(), b"x");
    }

    #[cfg(unix)]
    #[test]
    fn world_readable_key_file_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master.key");
        std::fs::write(&path, Cipher::generate_key_text()).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = Cipher::load(None, &path, MissingKey::Refuse)
            .unwrap_err()
            .to_string();
        assert!(err.contains("chmod 600"), "{err}");
    }

    #[test]
    fn a_missing_key_file_is_created_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master.key");
        let err = Cipher::load(None, &path, MissingKey::Refuse)
            .unwrap_err()
            .to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(err.contains(MASTER_KEY_ENV), "{err}");
        assert!(!path.exists(), "a refused load creates nothing");
    }

    #[test]
    fn env_key_wins_and_bad_keys_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master.key");
        let key = hex::encode([7u8; 32]);
        let (_, source) = Cipher::load(Some(&key), &path, MissingKey::Create).unwrap();
        assert_eq!(source, KeySource::Env);
        assert!(!path.exists(), "an env key must not create a key file");
        let err = Cipher::load(Some("too-short"), &path, MissingKey::Create)
            .unwrap_err()
            .to_string();
        assert!(err.contains("master key"), "{err}");
    }
}
