-- The space registry (SQLite dialect). Times are Unix epoch milliseconds in
-- BIGINT columns so both dialects compare and index them the same way.
-- Table names avoid `jobs` and `workers`: apalis owns `Jobs`/`Workers` in the
-- same file and SQLite table names are case-insensitive.

CREATE TABLE connections (
    id            TEXT PRIMARY KEY,
    platform      TEXT NOT NULL,
    scope         TEXT NOT NULL,
    base_url      TEXT NOT NULL,
    owner         TEXT NOT NULL DEFAULT 'company',
    -- version byte || 24-byte nonce || XChaCha20-Poly1305 ciphertext
    token_sealed  BLOB NOT NULL,
    settings      TEXT NOT NULL DEFAULT '{}',
    status        TEXT NOT NULL DEFAULT 'enabled',
    risks         TEXT NOT NULL DEFAULT '[]',
    lease_owner   TEXT,
    lease_until   BIGINT,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL
);

CREATE TABLE spaces (
    address          TEXT PRIMARY KEY,
    kind             TEXT NOT NULL,
    tenant           TEXT NOT NULL,
    stable_id        TEXT NOT NULL,
    connection_id    TEXT NOT NULL REFERENCES connections(id),
    owner            TEXT NOT NULL,
    display_name     TEXT NOT NULL,
    container        TEXT,
    status           TEXT NOT NULL,
    archived         BOOLEAN NOT NULL DEFAULT FALSE,
    trashed          BOOLEAN NOT NULL DEFAULT FALSE,
    visibility       TEXT,
    first_seen_at    BIGINT NOT NULL,
    last_changed_at  BIGINT NOT NULL,
    missing_since    BIGINT,
    tombstoned_at    BIGINT
);
CREATE INDEX spaces_by_connection ON spaces (connection_id, status);
CREATE INDEX spaces_by_container ON spaces (container);

-- An alias is never deleted: a rename closes the old row (valid_to) and opens
-- a new one, so a lookup by an old name still finds the space.
CREATE TABLE aliases (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    space_address  TEXT NOT NULL REFERENCES spaces(address),
    kind           TEXT NOT NULL,
    value          TEXT NOT NULL,
    raw            TEXT NOT NULL,
    valid_from     BIGINT NOT NULL,
    valid_to       BIGINT
);
CREATE INDEX aliases_by_value ON aliases (kind, value);
CREATE INDEX aliases_by_space ON aliases (space_address);
CREATE UNIQUE INDEX aliases_one_active ON aliases (space_address, kind, value) WHERE valid_to IS NULL;

CREATE TABLE sync_runs (
    id                TEXT PRIMARY KEY,
    connection_id     TEXT NOT NULL REFERENCES connections(id),
    triggered_by      TEXT NOT NULL,
    worker            TEXT,
    outcome           TEXT NOT NULL,
    started_at        BIGINT NOT NULL,
    finished_at       BIGINT,
    pages             BIGINT NOT NULL DEFAULT 0,
    requests          BIGINT NOT NULL DEFAULT 0,
    not_modified      BIGINT NOT NULL DEFAULT 0,
    retries           BIGINT NOT NULL DEFAULT 0,
    rate_limit_waits  BIGINT NOT NULL DEFAULT 0,
    items_seen        BIGINT NOT NULL DEFAULT 0,
    created           BIGINT NOT NULL DEFAULT 0,
    updated           BIGINT NOT NULL DEFAULT 0,
    renamed           BIGINT NOT NULL DEFAULT 0,
    unchanged         BIGINT NOT NULL DEFAULT 0,
    missing           BIGINT NOT NULL DEFAULT 0,
    skipped_foreign   BIGINT NOT NULL DEFAULT 0,
    duration_ms       BIGINT NOT NULL DEFAULT 0,
    error             TEXT
);
CREATE INDEX sync_runs_by_connection ON sync_runs (connection_id, started_at);

CREATE TABLE audit_log (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    at           BIGINT NOT NULL,
    actor        TEXT NOT NULL,
    action       TEXT NOT NULL,
    target       TEXT NOT NULL,
    reason       TEXT,
    before_json  TEXT,
    after_json   TEXT
);

CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;

CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;
