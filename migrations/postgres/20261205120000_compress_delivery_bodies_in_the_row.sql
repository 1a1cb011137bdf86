-- The previous migration raised toast_tuple_target to a page so that a
-- compressed body stays in its row. It also stopped the compression of
-- every row under a page: PostgreSQL compresses a row's values only once
-- the row exceeds that target, so a 7.6 KB GitHub payload (about 2 KB
-- with lz4) was written whole, to the heap and to the WAL, three to four
-- times the bytes it needs.
--
-- The body's storage becomes MAIN instead: a row over the default target
-- (about 2 KB) has its body compressed in place, and the body moves to the
-- TOAST table only when even compressed it leaves the row over a page.
-- Bodies lz4 cannot shrink stay in the row as they are. Only rows written
-- from now on are affected.
ALTER TABLE webhook_deliveries ALTER COLUMN body SET STORAGE MAIN;
ALTER TABLE webhook_deliveries RESET (toast_tuple_target);
