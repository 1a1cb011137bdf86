-- The PostgreSQL twin drops the foreign keys of aliases and sightings to
-- their space (a sync writes them beside the space, in the same
-- transaction) and refuses a space's DELETE, so that nothing outlives its
-- space. SQLite keeps the keys (its sync is within 1.1x of the minimum
-- with them) and refuses the DELETE alike.
CREATE TRIGGER spaces_are_never_deleted
    BEFORE DELETE ON spaces
BEGIN
    SELECT RAISE(ABORT, 'a space is never deleted: it is tombstoned instead');
END;
