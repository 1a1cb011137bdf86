-- The PostgreSQL twin keeps compressed webhook bodies of up to a page in
-- the row instead of its TOAST table. SQLite has no TOAST (large values
-- spill to overflow pages on their own), so there is nothing to change.
-- Kept so both dialects list the same migrations.
SELECT 1;
