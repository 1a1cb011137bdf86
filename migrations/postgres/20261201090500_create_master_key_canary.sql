-- One value sealed with the master key when a key is first used on this
-- store; every start opens it, so a wrong key fails at once.
CREATE TABLE master_key_canary (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    sealed BYTEA NOT NULL,
    created_at BIGINT NOT NULL
);
