-- The PostgreSQL twin drops the deliveries' foreign key to their
-- connection (the statement that stores a delivery checks the connection
-- already) and refuses a connection's DELETE, so that no delivery outlives
-- its connection. SQLite keeps the key (one writer: it costs no lock
-- shared between writers there) and refuses the DELETE alike.
CREATE TRIGGER connections_are_never_deleted
    BEFORE DELETE ON connections
BEGIN
    SELECT RAISE(ABORT, 'a connection is never deleted: set its status instead');
END;
