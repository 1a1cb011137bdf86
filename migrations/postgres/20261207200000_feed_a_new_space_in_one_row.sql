-- A new space is one row of the change feed, its aliases in it; and a row
-- of the feed carries one index instead of three (PostgreSQL dialect).
--
-- Why: a first sync writes a space and about six aliases a repository, and
-- the feed took a `space-created` row and an `alias-added` row for each
-- alias, each with three index entries (the id, (tx, id), and
-- (space_address, id)): seven rows and 21 entries a repository, about a
-- fifth of PostgreSQL's time on the first sync of 50,000 repos, and
-- 350,000 rows for a reader, a manifest diff or matching to go through.
--
-- - `space-created` now lists the space's active aliases when it is
--   written (`detail.aliases`, each {alias_kind, value, raw}, in the order
--   they were added), and an alias gets an `alias-added` row only when its
--   space already exists. The store writes a new space's aliases before
--   the space, in the same transaction, so they are in its row; an alias
--   added to an existing space (a rename, a transfer) is a row of its
--   own, as before. Every alias is in the feed exactly once either way.
-- - (space_address, id) was read by no query: it goes. The id alone was
--   the primary key, and (tx, id), which every reader and retention walk,
--   a second index: (tx, id) is the primary key now (the id is unique, so
--   the pair is), one index a row.

DROP INDEX space_changes_by_space;
ALTER TABLE space_changes DROP CONSTRAINT space_changes_pkey;
ALTER TABLE space_changes ADD CONSTRAINT space_changes_pkey PRIMARY KEY (tx, id);
DROP INDEX space_changes_by_cursor;

CREATE OR REPLACE FUNCTION space_changes_on_spaces_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO space_changes (kind, space_address, owner, detail, at)
    SELECT 'space-created', n.address, n.owner,
           json_build_object(
               'status', n.status,
               'display_name', n.display_name,
               -- A lookup per new space by aliases_one_active, as the
               -- aliases' trigger looks its space up by its key.
               'aliases', COALESCE(
                   (SELECT json_agg(json_build_object('alias_kind', a.kind, 'value', a.value, 'raw', a.raw)
                                    ORDER BY a.id)
                    FROM aliases a
                    WHERE a.space_address = n.address AND a.valid_to IS NULL),
                   '[]'::json))::text,
           n.first_seen_at
    FROM new_spaces n;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION space_changes_on_aliases_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO space_changes (kind, space_address, owner, detail, at)
    SELECT 'alias-added', n.space_address, n.owner, n.detail, n.valid_from
    -- OFFSET 0 keeps the owner a lookup per row by the primary key (see
    -- 20261201190001): an alias whose space is not there yet has none, and
    -- is in the space's own row when the space is written.
    FROM (SELECT n.space_address, n.valid_from,
                 (SELECT owner FROM spaces WHERE address = n.space_address) AS owner,
                 json_build_object('alias_kind', n.kind, 'value', n.value, 'raw', n.raw)::text AS detail
          FROM new_aliases n
          OFFSET 0) n
    WHERE n.owner IS NOT NULL;
    RETURN NULL;
END $$;
