-- A member key is bound to one person (PostgreSQL dialect); resolve finds a
-- pasted bare id (a Bitbucket uuid, a Jira project id, a Drive folder id)
-- by the stable id without scanning every space.
ALTER TABLE api_keys ADD COLUMN person TEXT;
CREATE INDEX spaces_by_stable_id ON spaces (stable_id);
-- A person's manifest reads company spaces and that person's own.
CREATE INDEX spaces_by_owner ON spaces (owner, status);
