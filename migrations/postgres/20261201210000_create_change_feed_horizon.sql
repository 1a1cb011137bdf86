-- Retention of the change feed (PostgreSQL dialect). Pruning removes the
-- oldest rows of `space_changes` up to a cursor, and records that cursor
-- here first, so a reader whose cursor is older than what the feed still
-- holds is told so (410, or a manifest marked too old) instead of being
-- given a page with a hole in it. One row, written by the first prune.
CREATE TABLE space_changes_pruned (
    one        INTEGER PRIMARY KEY CHECK (one = 1),
    tx         BIGINT NOT NULL,
    id         BIGINT NOT NULL,
    pruned_at  BIGINT NOT NULL
);
