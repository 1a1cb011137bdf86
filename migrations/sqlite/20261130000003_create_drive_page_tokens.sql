-- Google Drive changes feed: where each shared drive's next incremental read
-- starts (changes.getStartPageToken after a full listing, then each
-- changes.list's newStartPageToken). Times are epoch milliseconds.
CREATE TABLE drive_page_tokens (
    connection_id  TEXT NOT NULL REFERENCES connections(id),
    drive_id       TEXT NOT NULL,
    page_token     TEXT NOT NULL,
    updated_at     BIGINT NOT NULL,
    PRIMARY KEY (connection_id, drive_id)
);
