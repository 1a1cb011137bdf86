-- Change-feed triggers that work only when there is a change to feed
-- (PostgreSQL dialect; SQLite's triggers already name their columns and
-- conditions, and run in process).
--
-- Why: the triggers of 20261201100000 ran a PL/pgSQL call for every row
-- written to spaces, aliases and sightings, also when the function then
-- decided there was nothing to record (every sighting a sync refreshes,
-- every unchanged field), and one INSERT per new space and per new alias.
-- A first sync of a 50,000-repo org made some 350,000 such calls. Now:
-- - inserts are fed once per statement from its transition table (one
--   INSERT … SELECT for a page of new spaces or aliases);
-- - updates run their row function only when the trigger's WHEN says a
--   fed column changed, which the server checks without calling it.
-- The rows written to space_changes are the same, in the same order.

DROP TRIGGER space_changes_spaces ON spaces;
DROP TRIGGER space_changes_aliases ON aliases;
DROP TRIGGER space_changes_sightings ON sightings;

CREATE FUNCTION space_changes_on_spaces_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO space_changes (kind, space_address, owner, detail, at)
    SELECT 'space-created', n.address, n.owner,
           json_build_object('status', n.status, 'display_name', n.display_name)::text,
           n.first_seen_at
    FROM new_spaces n;
    RETURN NULL;
END $$;

CREATE TRIGGER space_changes_spaces_inserted AFTER INSERT ON spaces
REFERENCING NEW TABLE AS new_spaces
FOR EACH STATEMENT EXECUTE FUNCTION space_changes_on_spaces_inserted();

-- The row function of 20261201100000 still decides what an update means.
CREATE TRIGGER space_changes_spaces_updated AFTER UPDATE ON spaces
FOR EACH ROW
WHEN (OLD.status IS DISTINCT FROM NEW.status
      OR OLD.archived IS DISTINCT FROM NEW.archived
      OR OLD.owner IS DISTINCT FROM NEW.owner)
EXECUTE FUNCTION space_changes_on_spaces();

CREATE FUNCTION space_changes_on_aliases_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO space_changes (kind, space_address, owner, detail, at)
    -- A lookup per row by the primary key, not a join: a transition
    -- table has no statistics, and a join may be planned as a scan of
    -- every space for each statement.
    SELECT 'alias-added', n.space_address,
           (SELECT owner FROM spaces WHERE address = n.space_address),
           json_build_object('alias_kind', n.kind, 'value', n.value, 'raw', n.raw)::text,
           n.valid_from
    FROM new_aliases n;
    RETURN NULL;
END $$;

CREATE TRIGGER space_changes_aliases_inserted AFTER INSERT ON aliases
REFERENCING NEW TABLE AS new_aliases
FOR EACH STATEMENT EXECUTE FUNCTION space_changes_on_aliases_inserted();

CREATE TRIGGER space_changes_aliases_retired AFTER UPDATE ON aliases
FOR EACH ROW
WHEN (OLD.valid_to IS NULL AND NEW.valid_to IS NOT NULL)
EXECUTE FUNCTION space_changes_on_aliases();

CREATE TRIGGER space_changes_sightings AFTER UPDATE ON sightings
FOR EACH ROW
WHEN (NEW.state = 'access-lost' AND OLD.state IS DISTINCT FROM NEW.state)
EXECUTE FUNCTION space_changes_on_sightings();
