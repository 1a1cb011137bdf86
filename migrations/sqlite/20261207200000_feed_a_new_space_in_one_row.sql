-- A new space is one row of the change feed, its aliases in it (SQLite
-- dialect; see the PostgreSQL twin for why).
--
-- `space-created` lists the space's active aliases when it is written
-- (`detail.aliases`, each {alias_kind, value, raw}, in the order they were
-- added), and an alias gets an `alias-added` row only when its space
-- already exists. The store writes a new space's aliases before the space,
-- in the same transaction (its foreign keys checked at commit), so they
-- are in its row; every alias is in the feed exactly once either way.
-- (space_address, id) was read by no query: it goes. The id is SQLite's
-- rowid here, so (tx, id) stays as it is.

DROP INDEX space_changes_by_space;

DROP TRIGGER space_changes_space_created;
CREATE TRIGGER space_changes_space_created AFTER INSERT ON spaces
BEGIN
    INSERT INTO space_changes (kind, space_address, owner, detail, at)
    VALUES ('space-created', NEW.address, NEW.owner,
            json_object(
                'status', NEW.status,
                'display_name', NEW.display_name,
                'aliases', json((SELECT json_group_array(json_object('alias_kind', kind, 'value', value, 'raw', raw))
                                 FROM (SELECT kind, value, raw FROM aliases
                                       WHERE space_address = NEW.address AND valid_to IS NULL
                                       ORDER BY id)))),
            NEW.first_seen_at);
END;

DROP TRIGGER space_changes_alias_added;
CREATE TRIGGER space_changes_alias_added AFTER INSERT ON aliases
WHEN EXISTS (SELECT 1 FROM spaces WHERE address = NEW.space_address)
BEGIN
    INSERT INTO space_changes (kind, space_address, owner, detail, at)
    VALUES ('alias-added', NEW.space_address,
            (SELECT owner FROM spaces WHERE address = NEW.space_address),
            json_object('alias_kind', NEW.kind, 'value', NEW.value, 'raw', NEW.raw), NEW.valid_from);
END;
