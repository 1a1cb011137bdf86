-- The change feed (SQLite dialect): one row per change to a space, written
-- by triggers so every write path (syncs, webhooks, tombstones, decisions)
-- feeds it without knowing about it. SQLite runs one writer at a time, so
-- rows commit in id order and `id` alone is a cursor that never skips;
-- `tx` is always 0 here and exists so both dialects order by (tx, id).
-- `owner` is the space's owner side when the change was made: readers
-- filter by it, never by a cursor of their own.
CREATE TABLE space_changes (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    tx             BIGINT NOT NULL DEFAULT 0,
    kind           TEXT NOT NULL,
    space_address  TEXT NOT NULL,
    owner          TEXT NOT NULL,
    detail         TEXT NOT NULL DEFAULT '{}',
    at             BIGINT NOT NULL
);
CREATE INDEX space_changes_by_space ON space_changes (space_address, id);
CREATE INDEX space_changes_by_cursor ON space_changes (tx, id);

CREATE TRIGGER space_changes_space_created AFTER INSERT ON spaces
BEGIN
    INSERT INTO space_changes (kind, space_address, owner, detail, at)
    VALUES ('space-created', NEW.address, NEW.owner,
            json_object('status', NEW.status, 'display_name', NEW.display_name), NEW.first_seen_at);
END;

CREATE TRIGGER space_changes_state AFTER UPDATE OF status, archived ON spaces
WHEN OLD.status IS NOT NEW.status OR OLD.archived IS NOT NEW.archived
BEGIN
    INSERT INTO space_changes (kind, space_address, owner, detail, at)
    VALUES ('state-changed', NEW.address, NEW.owner,
            json_object('state', CASE
                WHEN OLD.status IS NOT NEW.status AND NEW.status = 'active' THEN 'restored'
                WHEN OLD.status IS NOT NEW.status THEN NEW.status
                WHEN NEW.archived THEN 'archived'
                ELSE 'unarchived' END,
                'from', OLD.status, 'status', NEW.status), NEW.last_changed_at);
END;

CREATE TRIGGER space_changes_owner AFTER UPDATE OF owner ON spaces
WHEN OLD.owner IS NOT NEW.owner
BEGIN
    INSERT INTO space_changes (kind, space_address, owner, detail, at)
    VALUES ('owner-changed', NEW.address, NEW.owner,
            json_object('from', CASE WHEN OLD.owner = 'company' THEN 'company' ELSE 'person' END,
                        'to', CASE WHEN NEW.owner = 'company' THEN 'company' ELSE 'person' END),
            NEW.last_changed_at);
END;

CREATE TRIGGER space_changes_alias_added AFTER INSERT ON aliases
BEGIN
    INSERT INTO space_changes (kind, space_address, owner, detail, at)
    VALUES ('alias-added', NEW.space_address,
            (SELECT owner FROM spaces WHERE address = NEW.space_address),
            json_object('alias_kind', NEW.kind, 'value', NEW.value, 'raw', NEW.raw), NEW.valid_from);
END;

CREATE TRIGGER space_changes_alias_retired AFTER UPDATE OF valid_to ON aliases
WHEN OLD.valid_to IS NULL AND NEW.valid_to IS NOT NULL
BEGIN
    INSERT INTO space_changes (kind, space_address, owner, detail, at)
    VALUES ('alias-retired', NEW.space_address,
            (SELECT owner FROM spaces WHERE address = NEW.space_address),
            json_object('alias_kind', NEW.kind, 'value', NEW.value, 'raw', NEW.raw), NEW.valid_to);
END;

CREATE TRIGGER space_changes_access_lost AFTER UPDATE OF state ON sightings
WHEN NEW.state = 'access-lost' AND OLD.state IS NOT NEW.state
BEGIN
    INSERT INTO space_changes (kind, space_address, owner, detail, at)
    VALUES ('state-changed', NEW.space_address,
            (SELECT owner FROM spaces WHERE address = NEW.space_address),
            json_object('state', 'access-lost', 'connection_id', NEW.connection_id), NEW.state_since);
END;

CREATE TRIGGER space_changes_mapping_approved AFTER INSERT ON mappings
BEGIN
    INSERT INTO space_changes (kind, space_address, owner, detail, at)
    VALUES ('mapping-approved', NEW.space_address,
            COALESCE((SELECT owner FROM spaces WHERE address = NEW.space_address), 'company'),
            json_object('place_id', NEW.place_id), NEW.created_at);
END;

CREATE TRIGGER space_changes_mapping_undone AFTER DELETE ON mappings
BEGIN
    INSERT INTO space_changes (kind, space_address, owner, detail, at)
    VALUES ('mapping-undone', OLD.space_address,
            COALESCE((SELECT owner FROM spaces WHERE address = OLD.space_address), 'company'),
            json_object('place_id', OLD.place_id),
            CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
END;
