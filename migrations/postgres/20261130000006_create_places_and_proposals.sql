-- Places of cMCP (projects, teams, clients), mapping proposals with their
-- evidence, approved mappings, API keys and admin sessions (PostgreSQL).
-- Times are epoch milliseconds in BIGINT columns, as everywhere else.

CREATE TABLE places (
    id          TEXT PRIMARY KEY,
    kind        TEXT NOT NULL,
    name        TEXT NOT NULL,
    place_key   TEXT,
    -- 'active' or 'retired': a place missing from an import is retired,
    -- never deleted, so mappings that point at it stay valid.
    status      TEXT NOT NULL DEFAULT 'active',
    retired_at  BIGINT,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);

-- Extra names and keys of a place; a changed key keeps its old value here
-- with valid_to set (a retired key still matches, and says so).
CREATE TABLE place_aliases (
    id          BIGSERIAL PRIMARY KEY,
    place_id    TEXT NOT NULL REFERENCES places(id),
    kind        TEXT NOT NULL,
    value       TEXT NOT NULL,
    raw         TEXT NOT NULL,
    valid_from  BIGINT NOT NULL,
    valid_to    BIGINT
);
CREATE INDEX place_aliases_by_place ON place_aliases (place_id);
CREATE UNIQUE INDEX place_aliases_one_active ON place_aliases (place_id, kind, value) WHERE valid_to IS NULL;

CREATE TABLE proposals (
    id             BIGSERIAL PRIMARY KEY,
    container      TEXT NOT NULL,
    platform       TEXT NOT NULL,
    space_name     TEXT NOT NULL,
    -- 'place:<id>' or 'create:<name>'
    target         TEXT NOT NULL,
    place_id       TEXT REFERENCES places(id),
    create_name    TEXT,
    evidence_json  TEXT NOT NULL,
    evidence_text  TEXT NOT NULL,
    confidence     BIGINT NOT NULL,
    conflict       BOOLEAN NOT NULL DEFAULT FALSE,
    state          TEXT NOT NULL DEFAULT 'proposed',
    evidence_hash  TEXT NOT NULL,
    created_at     BIGINT NOT NULL,
    decided_by     TEXT,
    decided_at     BIGINT,
    reason         TEXT
);
CREATE UNIQUE INDEX proposals_once_per_evidence ON proposals (container, target, evidence_hash);
CREATE INDEX proposals_by_state ON proposals (state, platform, confidence);

CREATE TABLE mappings (
    space_address  TEXT PRIMARY KEY,
    place_id       TEXT NOT NULL REFERENCES places(id),
    approved_by    TEXT NOT NULL,
    proposal_id    BIGINT REFERENCES proposals(id),
    created_at     BIGINT NOT NULL
);
CREATE INDEX mappings_by_place ON mappings (place_id);

CREATE TABLE api_keys (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    key_hash    TEXT NOT NULL UNIQUE,
    role        TEXT NOT NULL,
    powers      TEXT NOT NULL DEFAULT '',
    created_at  BIGINT NOT NULL,
    created_by  TEXT NOT NULL,
    revoked_at  BIGINT
);

CREATE TABLE admin_sessions (
    id_hash     TEXT PRIMARY KEY,
    key_id      TEXT NOT NULL REFERENCES api_keys(id),
    csrf_hash   TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL
);
