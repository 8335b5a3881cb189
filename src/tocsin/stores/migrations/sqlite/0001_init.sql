-- Tocsin store, schema version 1 (SQLite).
CREATE TABLE IF NOT EXISTS meta (
    k TEXT PRIMARY KEY,
    v TEXT NOT NULL
);
CREATE TABLE schedules (
    id           TEXT PRIMARY KEY,
    tenant       TEXT NOT NULL,
    channel      TEXT NOT NULL,
    payload      BLOB NOT NULL,
    payload_kind TEXT NOT NULL,
    headers      TEXT NOT NULL,
    due_ms       INTEGER NOT NULL,
    next_ms      INTEGER NOT NULL,
    bucket       INTEGER NOT NULL,
    status       TEXT NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    claim_epoch  INTEGER,
    claimed_ms   INTEGER,
    created_ms   INTEGER NOT NULL,
    delivered_ms INTEGER,
    last_error   TEXT,
    key          TEXT,
    fingerprint  TEXT,
    ordering_key TEXT
);
CREATE UNIQUE INDEX schedules_key ON schedules (tenant, key) WHERE key IS NOT NULL;
CREATE INDEX schedules_pending ON schedules (bucket, next_ms) WHERE status = 'PENDING';
CREATE INDEX schedules_next ON schedules (next_ms) WHERE status = 'PENDING';
CREATE INDEX schedules_claimed ON schedules (claim_epoch, bucket) WHERE status = 'CLAIMED';
CREATE INDEX schedules_lease ON schedules (claimed_ms) WHERE status = 'CLAIMED';
CREATE INDEX schedules_status ON schedules (status, channel);
CREATE TABLE claims (
    epoch      INTEGER NOT NULL,
    bucket_lo  INTEGER NOT NULL,
    bucket_hi  INTEGER NOT NULL,
    claimed_ms INTEGER NOT NULL,
    PRIMARY KEY (epoch, bucket_lo, bucket_hi)
);
CREATE TABLE deliveries (
    delivery_id TEXT NOT NULL,
    schedule_id TEXT NOT NULL,
    attempt     INTEGER NOT NULL,
    epoch       INTEGER NOT NULL,
    started_ms  INTEGER NOT NULL,
    ended_ms    INTEGER NOT NULL,
    outcome     TEXT NOT NULL,
    error       TEXT,
    lateness_ms INTEGER NOT NULL
);
CREATE INDEX deliveries_schedule ON deliveries (schedule_id);
CREATE TABLE channels (
    name   TEXT PRIMARY KEY,
    kind   TEXT NOT NULL,
    config TEXT NOT NULL
);
CREATE TABLE beats (
    component TEXT PRIMARY KEY,
    at_ms     INTEGER NOT NULL,
    info      TEXT NOT NULL
);
