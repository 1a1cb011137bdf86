-- The rate budget of each credential, shared by every worker of a fleet.
-- A key is `<platform>:<credential fingerprint>:<resource>` (the
-- fingerprint is a keyed hash of the token, never the token). Workers
-- reserve one unit with a conditional UPDATE before each request and settle
-- it with the answer's headers afterwards. Times are epoch milliseconds.
CREATE TABLE rate_budgets (
    budget_key     TEXT PRIMARY KEY,
    -- Units left in the current window; NULL while unknown (only one probe
    -- request may then be in flight).
    remaining      BIGINT,
    -- The full window (`x-ratelimit-limit`): a new window starts this full.
    request_limit  BIGINT,
    -- When the current window resets; NULL right after a rollover, until
    -- the first answer of the new window says.
    reset_at       BIGINT,
    -- The reset of the window rolled away from: answers of that window
    -- arriving late are ignored.
    window_floor   BIGINT,
    -- No request before this (retry-after, secondary limits).
    paused_until   BIGINT,
    -- Reserved and not yet settled.
    in_flight      BIGINT NOT NULL DEFAULT 0,
    updated_at     BIGINT NOT NULL
);

-- Which budget each connection spends, for `connection list`.
CREATE TABLE rate_budget_users (
    connection_id  TEXT PRIMARY KEY,
    budget_key     TEXT NOT NULL,
    updated_at     BIGINT NOT NULL
);
CREATE INDEX rate_budget_users_by_key ON rate_budget_users (budget_key);
