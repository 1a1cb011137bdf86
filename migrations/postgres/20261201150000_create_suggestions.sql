-- A person's suggestions (postgres dialect). Times are epoch milliseconds.

-- Who belongs to a place, as `places import` / `PUT /v1/places` give it:
-- a suggestion is a link for a member, a request to join for anyone else.
CREATE TABLE place_members (
    place_id    TEXT NOT NULL REFERENCES places(id),
    person      TEXT NOT NULL,
    added_at    BIGINT NOT NULL,
    PRIMARY KEY (place_id, person)
);
CREATE INDEX place_members_by_person ON place_members (person);

-- One row per (person, private space, target): 'place:<id>' or 'create'.
-- kind: link, request-to-join, request-to-create. state: open, accepted,
-- declined. A declined row stays declined while evidence_hash is the same;
-- an accepted link is what the person's manifest files the space under;
-- an accepted request (to join, to create) is one an ADMIN reads.
CREATE TABLE suggestions (
    id             BIGSERIAL PRIMARY KEY,
    person         TEXT NOT NULL,
    space_address  TEXT NOT NULL,
    target         TEXT NOT NULL,
    kind           TEXT NOT NULL,
    place_id       TEXT REFERENCES places(id),
    create_name    TEXT,
    evidence_json  TEXT NOT NULL,
    evidence_text  TEXT NOT NULL,
    confidence     BIGINT NOT NULL,
    evidence_hash  TEXT NOT NULL,
    state          TEXT NOT NULL DEFAULT 'open',
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL,
    decided_by     TEXT,
    decided_at     BIGINT
);
CREATE UNIQUE INDEX suggestions_one_per_target ON suggestions (person, space_address, target);
CREATE INDEX suggestions_by_state ON suggestions (state, kind);
