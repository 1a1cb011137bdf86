-- Every change to `api_keys` (a revoke above all) is announced on the
-- `cmcp_api_keys` channel when it commits, so each process that keeps live
-- keys in memory forgets them at once (see registry/src/store/key_cache.rs).
CREATE FUNCTION api_keys_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('cmcp_api_keys', '');
    RETURN NULL;
END $$;

CREATE TRIGGER api_keys_changed AFTER UPDATE OR DELETE ON api_keys
FOR EACH STATEMENT EXECUTE FUNCTION api_keys_notify();
