-- Schema version 4 (PostgreSQL): recurring schedules, skipped firings, throttling policies, tokens.
-- A schedule may name a policy (its claims then go through the policy's tokens) and the
-- recurring firing it came from. The pending-time indexes leave policy rows to their own.
ALTER TABLE schedules ADD COLUMN policy TEXT;
ALTER TABLE schedules ADD COLUMN recurring_id TEXT;
ALTER TABLE schedules ADD COLUMN firing_ms BIGINT;
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
    id                TEXT COLLATE "C" PRIMARY KEY,
    tenant            TEXT NOT NULL,
    cron              TEXT NOT NULL,
    timezone          TEXT NOT NULL,
    start_ms          BIGINT,
    end_ms            BIGINT,
    channel           TEXT NOT NULL,
    payload           BYTEA NOT NULL,
    payload_kind      TEXT NOT NULL,
    headers           TEXT NOT NULL,
    per_firing        BIGINT NOT NULL,
    stagger_ms        BIGINT NOT NULL,
    misfire           TEXT NOT NULL,
    misfire_grace_ms  BIGINT NOT NULL,
    policy            TEXT,
    paused            BIGINT NOT NULL,
    revision          BIGINT NOT NULL,
    expanded_until_ms BIGINT,
    next_expand_ms    BIGINT,
    bucket            BIGINT NOT NULL,
    created_ms        BIGINT NOT NULL,
    updated_ms        BIGINT NOT NULL
);
CREATE INDEX recurring_expand ON recurring (bucket, next_expand_ms)
    WHERE next_expand_ms IS NOT NULL;
CREATE INDEX recurring_next ON recurring (next_expand_ms) WHERE next_expand_ms IS NOT NULL;
CREATE TABLE skipped_firings (
    recurring_id TEXT NOT NULL,
    revision     BIGINT NOT NULL,
    firing_ms    BIGINT NOT NULL,
    reason       TEXT NOT NULL,
    recorded_ms  BIGINT NOT NULL,
    PRIMARY KEY (recurring_id, revision, firing_ms)
);
CREATE TABLE policies (
    name           TEXT COLLATE "C" PRIMARY KEY,
    max_in_flight  BIGINT NOT NULL,
    rate           DOUBLE PRECISION,
    token_lease_ms BIGINT NOT NULL,
    rate_tokens    DOUBLE PRECISION NOT NULL,
    rate_ms        BIGINT NOT NULL,
    created_ms     BIGINT NOT NULL
);
CREATE TABLE tokens (
    delivery_id TEXT PRIMARY KEY,
    policy      TEXT NOT NULL,
    schedule_id TEXT NOT NULL,
    taken_ms    BIGINT NOT NULL,
    expires_ms  BIGINT NOT NULL
);
CREATE INDEX tokens_policy ON tokens (policy, expires_ms)
;
