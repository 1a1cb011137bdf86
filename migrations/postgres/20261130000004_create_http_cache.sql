-- Conditional-request cache: the last answer of each listing page, per
-- connection (so one credential's answers never serve another). A 304
-- reuses `body`; `link` keeps the page's Link header, which a 304 need not
-- repeat. Written only when a page's ETag changed.
CREATE TABLE http_cache (
    connection_id  TEXT NOT NULL,
    url            TEXT NOT NULL,
    etag           TEXT NOT NULL,
    body           TEXT NOT NULL,
    link           TEXT,
    fetched_at     BIGINT NOT NULL,
    PRIMARY KEY (connection_id, url)
);
