-- Incremental matching (SQLite dialect). After a sync the ladder refreshes
-- only the containers a change can reach: it reads the change feed from its
-- own position (`matching_position`) and the few changes the feed does not
-- carry (`matching_dirty`), then looks the candidates' neighbours up by
-- index. The full recompute (reconcile, places import) moves the position
-- to the head and empties `matching_dirty`.

CREATE TABLE matching_position (
    name  TEXT PRIMARY KEY,
    tx    BIGINT NOT NULL,
    id    BIGINT NOT NULL
);

-- What matching must look at again that `space_changes` does not say: a
-- space renamed without a new name alias (a change of case) or moved to
-- another container (the old container loses a repo), and a container
-- whose proposal an ADMIN decided (an undo reopens it).
CREATE TABLE matching_dirty (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    space_address  TEXT NOT NULL,
    old_container  TEXT
);

CREATE TRIGGER matching_dirty_space AFTER UPDATE OF display_name, container ON spaces
WHEN OLD.display_name IS NOT NEW.display_name OR OLD.container IS NOT NEW.container
BEGIN
    INSERT INTO matching_dirty (space_address, old_container) VALUES (NEW.address, OLD.container);
END;

CREATE TRIGGER matching_dirty_decision AFTER UPDATE OF decided_at ON proposals
WHEN OLD.decided_at IS NOT NEW.decided_at
BEGIN
    INSERT INTO matching_dirty (space_address, old_container) VALUES (NEW.container, NULL);
END;

-- The head of a repo name as a Jira key (`PAY-ledger` -> `PAY`), so a
-- changed or newly mapped Jira project finds the repos named after it by
-- index. A superset: the ladder checks the exact rule.
ALTER TABLE spaces ADD COLUMN name_prefix TEXT GENERATED ALWAYS AS (
    CASE WHEN instr(display_name, '-') BETWEEN 2 AND 11
         THEN upper(substr(display_name, 1, instr(display_name, '-') - 1)) END
) VIRTUAL;
CREATE INDEX spaces_by_name_prefix ON spaces (name_prefix) WHERE name_prefix IS NOT NULL;

-- Which places the ladder last saw: a random token that every write to
-- places or their aliases replaces. The incremental refresh keeps its
-- place index while the token stays; `ladder_version` is the token the
-- last full recompute read, so a places import whose recompute failed is
-- recomputed by the next refresh.
CREATE TABLE matching_places_version (
    one             INTEGER PRIMARY KEY CHECK (one = 1),
    version         TEXT NOT NULL,
    ladder_version  TEXT
);
INSERT INTO matching_places_version (one, version) VALUES (1, lower(hex(randomblob(16))));

CREATE TRIGGER matching_places_inserted AFTER INSERT ON places
BEGIN
    UPDATE matching_places_version SET version = lower(hex(randomblob(16)));
END;
CREATE TRIGGER matching_places_updated AFTER UPDATE ON places
BEGIN
    UPDATE matching_places_version SET version = lower(hex(randomblob(16)));
END;
CREATE TRIGGER matching_place_aliases_inserted AFTER INSERT ON place_aliases
BEGIN
    UPDATE matching_places_version SET version = lower(hex(randomblob(16)));
END;
CREATE TRIGGER matching_place_aliases_updated AFTER UPDATE ON place_aliases
BEGIN
    UPDATE matching_places_version SET version = lower(hex(randomblob(16)));
END;
