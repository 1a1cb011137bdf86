-- The PostgreSQL twin announces changes to `api_keys` so processes may keep
-- live keys in memory. SQLite has no notifications, and the process that
-- revokes a key (the CLI) is not the one serving: keys are never cached
-- here, so there is nothing to announce. Kept so both dialects list the
-- same migrations.
SELECT 1;
