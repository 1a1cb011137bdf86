-- The statement that stores a delivery already checks its connection
-- against the committed row (the premise: it exists, is of the platform
-- and takes deliveries). The foreign key checked it again, row by row,
-- after the INSERT: one more lookup of the same row per delivery, which
-- also took a FOR KEY SHARE lock on it, so every concurrent batch of one
-- connection locked the same connections row (a MultiXact when two
-- overlapped). It goes.
--
-- What the key also guaranteed, that no delivery outlives its connection,
-- now holds because connections are never deleted: a connection is
-- retired by its status (disabled, unlinked, rejected), and the trigger
-- below refuses a DELETE, so the guarantee covers every table that names
-- a connection, not only this one.
ALTER TABLE webhook_deliveries DROP CONSTRAINT IF EXISTS webhook_deliveries_connection_id_fkey;

CREATE FUNCTION connections_are_never_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'connection % is never deleted: set its status instead', OLD.id
        USING ERRCODE = 'restrict_violation';
END
$$;

CREATE TRIGGER connections_are_never_deleted
    BEFORE DELETE ON connections
    FOR EACH ROW EXECUTE FUNCTION connections_are_never_deleted();
