-- The change feed (PostgreSQL dialect): one row per change to a space,
-- written by triggers so every write path (syncs, webhooks, tombstones,
-- decisions) feeds it without knowing about it.
--
-- Why `tx`: with concurrent writers a sequence does not commit in order (a
-- transaction holding id 10 can commit after one holding id 11), so a
-- reader that remembers "after 11" would skip 10 for ever. Each row keeps
-- the id of the transaction that wrote it; a reader reads only rows whose
-- transaction is older than the oldest one still running
-- (`pg_snapshot_xmin(pg_current_snapshot())`), in (tx, id) order. Every
-- transaction that commits later has a larger tx than anything a reader
-- has already been given, so the (tx, id) cursor never skips a committed
-- change. `owner` is the space's owner side when the change was made:
-- readers filter by it, never by a cursor of their own.
CREATE TABLE space_changes (
    id             BIGSERIAL PRIMARY KEY,
    tx             BIGINT NOT NULL DEFAULT (pg_current_xact_id()::text::bigint),
    kind           TEXT NOT NULL,
    space_address  TEXT NOT NULL,
    owner          TEXT NOT NULL,
    detail         TEXT NOT NULL DEFAULT '{}',
    at             BIGINT NOT NULL
);
CREATE INDEX space_changes_by_space ON space_changes (space_address, id);
CREATE INDEX space_changes_by_cursor ON space_changes (tx, id);

CREATE FUNCTION space_changes_now() RETURNS BIGINT LANGUAGE SQL AS
$$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint $$;

CREATE FUNCTION space_changes_side(o TEXT) RETURNS TEXT LANGUAGE SQL AS
$$ SELECT CASE WHEN o = 'company' THEN 'company' ELSE 'person' END $$;

CREATE FUNCTION space_changes_on_spaces() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO space_changes (kind, space_address, owner, detail, at)
        VALUES ('space-created', NEW.address, NEW.owner,
                json_build_object('status', NEW.status, 'display_name', NEW.display_name)::text,
                NEW.first_seen_at);
        RETURN NULL;
    END IF;
    IF OLD.status IS DISTINCT FROM NEW.status OR OLD.archived IS DISTINCT FROM NEW.archived THEN
        INSERT INTO space_changes (kind, space_address, owner, detail, at)
        VALUES ('state-changed', NEW.address, NEW.owner,
                json_build_object('state', CASE
                    WHEN OLD.status IS DISTINCT FROM NEW.status AND NEW.status = 'active' THEN 'restored'
                    WHEN OLD.status IS DISTINCT FROM NEW.status THEN NEW.status
                    WHEN NEW.archived THEN 'archived'
                    ELSE 'unarchived' END,
                    'from', OLD.status, 'status', NEW.status)::text,
                NEW.last_changed_at);
    END IF;
    IF OLD.owner IS DISTINCT FROM NEW.owner THEN
        INSERT INTO space_changes (kind, space_address, owner, detail, at)
        VALUES ('owner-changed', NEW.address, NEW.owner,
                json_build_object('from', space_changes_side(OLD.owner),
                                  'to', space_changes_side(NEW.owner))::text,
                NEW.last_changed_at);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER space_changes_spaces AFTER INSERT OR UPDATE ON spaces
FOR EACH ROW EXECUTE FUNCTION space_changes_on_spaces();

CREATE FUNCTION space_changes_on_aliases() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO space_changes (kind, space_address, owner, detail, at)
        VALUES ('alias-added', NEW.space_address,
                (SELECT owner FROM spaces WHERE address = NEW.space_address),
                json_build_object('alias_kind', NEW.kind, 'value', NEW.value, 'raw', NEW.raw)::text,
                NEW.valid_from);
    ELSIF OLD.valid_to IS NULL AND NEW.valid_to IS NOT NULL THEN
        INSERT INTO space_changes (kind, space_address, owner, detail, at)
        VALUES ('alias-retired', NEW.space_address,
                (SELECT owner FROM spaces WHERE address = NEW.space_address),
                json_build_object('alias_kind', NEW.kind, 'value', NEW.value, 'raw', NEW.raw)::text,
                NEW.valid_to);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER space_changes_aliases AFTER INSERT OR UPDATE ON aliases
FOR EACH ROW EXECUTE FUNCTION space_changes_on_aliases();

CREATE FUNCTION space_changes_on_sightings() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'access-lost' AND OLD.state IS DISTINCT FROM NEW.state THEN
        INSERT INTO space_changes (kind, space_address, owner, detail, at)
        VALUES ('state-changed', NEW.space_address,
                (SELECT owner FROM spaces WHERE address = NEW.space_address),
                json_build_object('state', 'access-lost', 'connection_id', NEW.connection_id)::text,
                NEW.state_since);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER space_changes_sightings AFTER UPDATE ON sightings
FOR EACH ROW EXECUTE FUNCTION space_changes_on_sightings();

CREATE FUNCTION space_changes_on_mappings() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO space_changes (kind, space_address, owner, detail, at)
        VALUES ('mapping-approved', NEW.space_address,
                COALESCE((SELECT owner FROM spaces WHERE address = NEW.space_address), 'company'),
                json_build_object('place_id', NEW.place_id)::text, NEW.created_at);
    ELSE
        INSERT INTO space_changes (kind, space_address, owner, detail, at)
        VALUES ('mapping-undone', OLD.space_address,
                COALESCE((SELECT owner FROM spaces WHERE address = OLD.space_address), 'company'),
                json_build_object('place_id', OLD.place_id)::text, space_changes_now());
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER space_changes_mappings AFTER INSERT OR DELETE ON mappings
FOR EACH ROW EXECUTE FUNCTION space_changes_on_mappings();
