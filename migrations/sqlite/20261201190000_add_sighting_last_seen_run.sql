-- The run whose listing last saw each sighting (SQLite dialect). A
-- complete listing decides what it did not see in one statement over the
-- connection's sightings (those not stamped with its run), so the sync
-- engine holds no set of every address it listed. NULL: no listing run
-- has seen it since this column exists (a webhook re-read, an older row).
ALTER TABLE sightings ADD COLUMN last_seen_run TEXT;
