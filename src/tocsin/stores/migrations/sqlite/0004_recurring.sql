-- Schema version 4 (SQLite): recurring schedules, skipped firings, throttling policies, tokens.
-- A schedule may name a policy (its claims then go through the policy's tokens) and the
-- recurring firing it came from. The pending-time indexes leave policy rows to their own.
ALTER TABLE schedules ADD COLUMN policy TEXT;
ALTER TABLE schedules ADD COLUMN recurring_id TEXT;
ALTER TABLE schedules ADD COLUMN firing_ms INTEGER;
DROP INDEX schedules_pending;
DROP INDEX schedules_next;
CREATE INDEX schedules_pending ON schedules (bucket, next_ms)
    WHERE status = 'PENDING' AND policy IS NULL;
CREATE INDEX schedules_next ON schedules (next_ms) WHERE status = 'PENDING' AND policy IS NULL;
CREATE INDEX schedules_policy ON schedules (policy, next_ms)
    WHERE status = 'PENDING' AND policy IS NOT NULL;
CREATE INDEX schedules_recurring ON schedules (recurring_id, firing_ms)
    WHERE recurring_id IS NOT NULL;
CREATE TABLE recurring (
    id                TEXT PRIMARY KEY,
    tenant            TEXT NOT NULL,
    cron              TEXT NOT NULL,
    timezone          TEXT NOT NULL,
    start_ms          INTEGER,
    end_ms            INTEGER,
    channel           TEXT NOT NULL,
    payload           BLOB NOT NULL,
    payload_kind      TEXT NOT NULL,
    headers           TEXT NOT NULL,
    per_firing        INTEGER NOT NULL,
    stagger_ms        INTEGER NOT NULL,
    misfire           TEXT NOT NULL,
    misfire_grace_ms  INTEGER NOT NULL,
    policy            TEXT,
    paused            INTEGER NOT NULL,
    revision          INTEGER NOT NULL,
    expanded_until_ms INTEGER,
    next_expand_ms    INTEGER,
    bucket            INTEGER NOT NULL,
    created_ms        INTEGER NOT NULL,
    updated_ms        INTEGER NOT NULL
);
CREATE INDEX recurring_expand ON recurring (bucket, next_expand_ms)
    WHERE next_expand_ms IS NOT NULL;
CREATE INDEX recurring_next ON recurring (next_expand_ms) WHERE next_expand_ms IS NOT NULL;
CREATE TABLE skipped_firings (
    recurring_id TEXT NOT NULL,
    revision     INTEGER NOT NULL,
    firing_ms    INTEGER NOT NULL,
    reason       TEXT NOT NULL,
    recorded_ms  INTEGER NOT NULL,
    PRIMARY KEY (recurring_id, revision, firing_ms)
);
CREATE TABLE policies (
    name           TEXT PRIMARY KEY,
    max_in_flight  INTEGER NOT NULL,
    rate           REAL,
    token_lease_ms INTEGER NOT NULL,
    rate_tokens    REAL NOT NULL,
    rate_ms        INTEGER NOT NULL,
    created_ms     INTEGER NOT NULL
);
CREATE TABLE tokens (
    delivery_id TEXT PRIMARY KEY,
    policy      TEXT NOT NULL,
    schedule_id TEXT NOT NULL,
    taken_ms    INTEGER NOT NULL,
    expires_ms  INTEGER NOT NULL
);
CREATE INDEX tokens_policy ON tokens (policy, expires_ms)
