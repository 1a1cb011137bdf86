-- A space changed owner side (PostgreSQL dialect): a person's private space
-- became company-owned when a company connection first saw it. Kept for the
-- change feed; rows are never updated. Owners are spelled as in
-- spaces.owner ('company', 'person:<id>'); person names the person whose
-- space it was.
CREATE TABLE owner_changes (
    id             BIGSERIAL PRIMARY KEY,
    space_address  TEXT NOT NULL REFERENCES spaces(address),
    from_owner     TEXT NOT NULL,
    to_owner       TEXT NOT NULL,
    person         TEXT,
    connection_id  TEXT NOT NULL REFERENCES connections(id),
    at             BIGINT NOT NULL
);
CREATE INDEX owner_changes_by_space ON owner_changes (space_address, id);
