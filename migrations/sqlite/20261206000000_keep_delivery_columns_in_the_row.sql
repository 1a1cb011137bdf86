-- The PostgreSQL twin keeps a delivery row's short text columns out of
-- TOAST. SQLite has no TOAST, so there is nothing to change. Kept so both
-- dialects list the same migrations.
SELECT 1;
