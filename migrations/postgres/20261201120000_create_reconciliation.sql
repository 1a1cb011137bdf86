-- Nightly reconciliation (postgres dialect). Times are epoch milliseconds.

-- Consecutive complete listings of the connection without the space: after
-- `tombstone_after` of them the space is tombstoned (rule 4). A reading
-- that sees it again resets the count.
ALTER TABLE sightings ADD COLUMN missed_listings BIGINT NOT NULL DEFAULT 0;

-- Each change a reconcile run had to apply itself: one that no processed
-- webhook delivery (nor an earlier run) had already brought into the
-- registry. kind: created, renamed, key-changed, archived, unarchived, trashed,
-- missing, reappeared.
CREATE TABLE drift_changes (
    id             BIGSERIAL PRIMARY KEY,
    connection_id  TEXT NOT NULL REFERENCES connections(id),
    run_id         TEXT NOT NULL,
    space_address  TEXT NOT NULL,
    kind           TEXT NOT NULL,
    at             BIGINT NOT NULL
);
CREATE INDEX drift_changes_by_run ON drift_changes (connection_id, run_id);

-- The breaker: a complete listing that would have marked too many spaces
-- missing marked nothing and left the connection held. The addresses it
-- would have marked wait here for an ADMIN's confirmation.
CREATE TABLE connection_holds (
    connection_id  TEXT PRIMARY KEY REFERENCES connections(id),
    run_id         TEXT NOT NULL,
    would_miss     BIGINT NOT NULL,
    seen_before    BIGINT NOT NULL,
    reason         TEXT NOT NULL,
    since          BIGINT NOT NULL
);
CREATE TABLE held_missing (
    connection_id  TEXT NOT NULL REFERENCES connection_holds(connection_id) ON DELETE CASCADE,
    space_address  TEXT NOT NULL,
    PRIMARY KEY (connection_id, space_address)
);

-- One row per (schedule, connection, tick): the primary key is what lets a
-- fleet of schedulers queue exactly one job per tick.
CREATE TABLE schedule_ticks (
    schedule       TEXT NOT NULL,
    connection_id  TEXT NOT NULL,
    tick_at        BIGINT NOT NULL,
    queued_at      BIGINT NOT NULL,
    PRIMARY KEY (schedule, connection_id, tick_at)
);
