-- A sync writes a page's spaces, then their aliases and sightings, in one
-- transaction: every alias and sighting it writes names a space the same
-- transaction just wrote or read. Their foreign keys to spaces checked it
-- again, row by row, after each INSERT: one more lookup of a space per
-- alias (a repository has about six) and per sighting, each taking a FOR
-- KEY SHARE lock on the space's row. On the sync bench that was a quarter
-- of the alias INSERTs' server time, and the first sync of 50,000 repos
-- on PostgreSQL went from 1.34x SQLite's time to 1.21x without them. They
-- go.
--
-- What the keys also guaranteed, that no alias or sighting outlives its
-- space, now holds because spaces are never deleted: a space leaves by its
-- status (missing, then tombstoned), and the trigger below refuses a
-- DELETE, as connections' does. The owner changes keep their key (written
-- once a transfer, not once a page).
ALTER TABLE aliases DROP CONSTRAINT IF EXISTS aliases_space_address_fkey;
ALTER TABLE sightings DROP CONSTRAINT IF EXISTS sightings_space_address_fkey;

CREATE FUNCTION spaces_are_never_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'space % is never deleted: it is tombstoned instead', OLD.address
        USING ERRCODE = 'restrict_violation';
END
$$;

CREATE TRIGGER spaces_are_never_deleted
    BEFORE DELETE ON spaces
    FOR EACH ROW EXECUTE FUNCTION spaces_are_never_deleted();
