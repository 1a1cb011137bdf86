-- webhook_deliveries_unprocessed (received_at WHERE status = 'received')
-- answers nothing that webhook_deliveries_state (status, received_at) does
-- not: the oldest unprocessed delivery is the first 'received' entry of the
-- latter. Every stored delivery wrote both.
DROP INDEX IF EXISTS webhook_deliveries_unprocessed;
