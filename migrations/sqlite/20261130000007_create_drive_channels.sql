-- Google Drive push channels (changes.watch), SQLite dialect. Times are
-- epoch milliseconds. A channel is live while stopped_at IS NULL and
-- expiration is in the future; rows are never deleted, so a notification
-- for a stopped or expired channel is told apart from an unknown one only
-- in logs, never accepted.
CREATE TABLE drive_channels (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    connection_id  TEXT NOT NULL REFERENCES connections(id),
    -- the shared drive watched; NULL = the user's own corpus
    drive_id       TEXT,
    channel_id     TEXT NOT NULL,
    -- version byte || nonce || ciphertext, bound to (connection, channel) by the AEAD's associated data
    token_sealed   BLOB NOT NULL,
    resource_id    TEXT NOT NULL,
    expiration     BIGINT NOT NULL,
    created_at     BIGINT NOT NULL,
    stopped_at     BIGINT
);
CREATE UNIQUE INDEX drive_channels_channel ON drive_channels (connection_id, channel_id);
CREATE INDEX drive_channels_unstopped ON drive_channels (connection_id, drive_id) WHERE stopped_at IS NULL;
