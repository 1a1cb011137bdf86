-- The PostgreSQL twin has webhook bodies under a page compressed in their
-- row. SQLite neither compresses nor has TOAST, so there is nothing to
-- change. Kept so both dialects list the same migrations.
SELECT 1;
