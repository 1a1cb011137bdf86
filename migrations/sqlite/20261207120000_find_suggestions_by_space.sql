-- A company sync that takes over a person's private space refreshes the
-- suggestions of whoever had one on it (Store::people_suggested_for): the
-- suggestions are found by their space, which no index led with.
CREATE INDEX suggestions_by_space ON suggestions (space_address);
