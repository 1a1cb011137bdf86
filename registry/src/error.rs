use thiserror::Error;

pub type Result<T, E = RegistryError> = std::result::Result<T, E>;

#[derive(Debug, Error)]
pub enum RegistryError {
    #[error("database url {0:?} is neither sqlite: nor postgres(ql)://")]
    UnsupportedUrl(String),
    #[error("cannot reach the database at {url}: {source}")]
    Unreachable {
        url: String,
        #[source]
        source: sqlx::Error,
    },
    #[error("database error: {0}")]
    Database(#[source] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("{what} not found")]
    NotFound { what: String },
    #[error("{what} already exists")]
    AlreadyExists { what: String },
    #[error("invalid {what}")]
    Invalid { what: String },
    /// A change-feed position older than what the feed still holds: the
    /// changes after it up to `oldest` were pruned, so reading on from it
    /// would skip them.
    #[error(
        "cursor {cursor} is older than the change feed keeps (the changes up to {oldest} were pruned): \
         read the manifest again and follow the feed from its version"
    )]
    FeedPruned { cursor: String, oldest: String },
    #[error("stored data is not valid: {what}")]
    Corrupt { what: String },
    #[error("secret store: {0}")]
    Cipher(String),
    /// The store's sealed values do not open with the master key in hand.
    #[error("wrong master key: the registry's sealed values do not open with it")]
    WrongMasterKey,
}

impl From<sqlx::Error> for RegistryError {
    fn from(e: sqlx::Error) -> Self {
        if let sqlx::Error::Database(db) = &e
            && db.is_unique_violation()
        {
            return RegistryError::AlreadyExists {
                what: db.constraint().unwrap_or("row").to_owned(),
            };
        }
        RegistryError::Database(e)
    }
}

impl RegistryError {
    pub fn not_found(what: impl Into<String>) -> Self {
        RegistryError::NotFound { what: what.into() }
    }

    /// Whether retrying the same call later may succeed (the database was
    /// unreachable or busy), as opposed to a mistake in the call.
    pub fn is_transient(&self) -> bool {
        match self {
            RegistryError::Unreachable { .. } => true,
            RegistryError::Database(e) => matches!(
                e,
                sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed
            ),
            _ => false,
        }
    }
}
