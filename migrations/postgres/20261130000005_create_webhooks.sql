-- Webhook secrets and deliveries (PostgreSQL dialect). Times are epoch ms.

-- One connection has one current secret (valid_until NULL) and, while a
-- rotation overlaps, older ones still accepted until valid_until.
CREATE TABLE webhook_secrets (
    id             BIGSERIAL PRIMARY KEY,
    connection_id  TEXT NOT NULL REFERENCES connections(id),
    -- version byte || nonce || ciphertext, bound to (connection, id) by the AEAD's associated data
    secret_sealed  BYTEA NOT NULL,
    created_at     BIGINT NOT NULL,
    valid_until    BIGINT
);
CREATE INDEX webhook_secrets_by_connection ON webhook_secrets (connection_id, valid_until);
CREATE UNIQUE INDEX webhook_secrets_one_current ON webhook_secrets (connection_id) WHERE valid_until IS NULL;

-- Every verified delivery, stored before it is acknowledged. The UNIQUE
-- index on (connection_id, delivery_key) is what makes a redelivery a
-- duplicate rather than a second job.
CREATE TABLE webhook_deliveries (
    id             TEXT PRIMARY KEY,
    connection_id  TEXT NOT NULL REFERENCES connections(id),
    platform       TEXT NOT NULL,
    delivery_key   TEXT NOT NULL,
    event          TEXT NOT NULL,
    received_at    BIGINT NOT NULL,
    headers        TEXT NOT NULL,
    body           BYTEA NOT NULL,
    verification   TEXT NOT NULL,
    status         TEXT NOT NULL,
    error          TEXT,
    processed_at   BIGINT
);
CREATE UNIQUE INDEX webhook_deliveries_key ON webhook_deliveries (connection_id, delivery_key);
CREATE INDEX webhook_deliveries_unprocessed ON webhook_deliveries (received_at) WHERE status = 'received';
