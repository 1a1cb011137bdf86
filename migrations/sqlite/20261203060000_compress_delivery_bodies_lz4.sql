-- The PostgreSQL twin compresses webhook bodies with lz4 instead of pglz.
-- SQLite does not compress values, so there is nothing to change. Kept so
-- both dialects list the same migrations.
SELECT 1;
