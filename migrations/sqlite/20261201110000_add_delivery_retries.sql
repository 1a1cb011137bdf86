-- A delivery whose processing fails is retried with backoff until a
-- horizon, then `failed`: how many tries it had and when the next is due.
-- A signed body seen again under a new delivery id within the dedupe
-- window is a replay, recognised by the hash of its bytes (NULL for Drive
-- notifications, which have no body).
ALTER TABLE webhook_deliveries ADD COLUMN attempts BIGINT NOT NULL DEFAULT 0;
ALTER TABLE webhook_deliveries ADD COLUMN next_attempt_at BIGINT;
ALTER TABLE webhook_deliveries ADD COLUMN body_sha256 TEXT;
CREATE INDEX webhook_deliveries_body ON webhook_deliveries (connection_id, body_sha256, received_at)
    WHERE body_sha256 IS NOT NULL;
CREATE INDEX webhook_deliveries_state ON webhook_deliveries (status, received_at);
