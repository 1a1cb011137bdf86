-- Which connections see which space (PostgreSQL dialect). A space is one platform
-- entity; a sighting is one connection's view of it. Times are epoch
-- milliseconds. state: 'seen' (in its last reading), 'missing' (absent from
-- a complete listing of that connection), 'access-lost' (a direct read by
-- that connection answered 404/410 without the authority to call it gone).
-- A space is missing only when no sighting of it is 'seen' any more.
CREATE TABLE sightings (
    connection_id  TEXT NOT NULL REFERENCES connections(id),
    space_address  TEXT NOT NULL REFERENCES spaces(address),
    state          TEXT NOT NULL DEFAULT 'seen',
    first_seen_at  BIGINT NOT NULL,
    last_seen_at   BIGINT NOT NULL,
    state_since    BIGINT NOT NULL,
    PRIMARY KEY (connection_id, space_address)
);
CREATE INDEX sightings_by_space ON sightings (space_address, state);

-- Until now a space named the one connection that last wrote it: that
-- reading becomes the space's first sighting. The last change is the best
-- known time it was seen.
INSERT INTO sightings (connection_id, space_address, state, first_seen_at, last_seen_at, state_since)
SELECT connection_id, address,
       CASE WHEN status = 'missing' THEN 'missing' ELSE 'seen' END,
       first_seen_at, last_changed_at, COALESCE(missing_since, first_seen_at)
FROM spaces;
