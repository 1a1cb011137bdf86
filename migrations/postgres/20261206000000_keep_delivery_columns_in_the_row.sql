-- A delivery row is over PostgreSQL's toast target (about 2 KB) whenever
-- its body is more than about 2 KB compressed. Before it compresses a
-- MAIN column (the body), PostgreSQL moves every EXTENDED value of more
-- than a toast pointer out of the row: the id, the delivery key, the
-- replay key and the headers went to the TOAST table one by one, a TOAST
-- row and a TOAST index entry each, in every delivery's write (the
-- deliveries bench's 7.6 KB body left 2 to 4 of them per delivery), and
-- every later read of those columns fetched them back.
--
-- The row's short text columns become MAIN too: they stay in the row, and
-- only the body (compressed first, being the largest) leaves it, and only
-- when even compressed it leaves the row over a page. Only rows written
-- from now on are affected; nothing is rewritten.
ALTER TABLE webhook_deliveries
    ALTER COLUMN id SET STORAGE MAIN,
    ALTER COLUMN connection_id SET STORAGE MAIN,
    ALTER COLUMN platform SET STORAGE MAIN,
    ALTER COLUMN delivery_key SET STORAGE MAIN,
    ALTER COLUMN event SET STORAGE MAIN,
    ALTER COLUMN headers SET STORAGE MAIN,
    ALTER COLUMN verification SET STORAGE MAIN,
    ALTER COLUMN status SET STORAGE MAIN,
    ALTER COLUMN error SET STORAGE MAIN,
    ALTER COLUMN replay_key SET STORAGE MAIN;
