-- Change-feed triggers that work only when there is a change to feed
-- (sqlite dialect). Nothing to do here: SQLite's triggers of
-- 20261201100000 already name their columns and conditions and run in
-- process. The PostgreSQL dialect replaces its per-row PL/pgSQL calls with
-- statement triggers and WHEN clauses; this file keeps the two dialects'
-- migration lists the same.
SELECT 1;
