-- Tocsin store, schema version 1 (PostgreSQL). The same tables and columns as SQLite's;
-- instants are BIGINT milliseconds, payloads BYTEA, headers and configs JSON text; ids and
-- names sort bytewise (COLLATE "C") as in SQLite, whatever the database's locale.
-- Run by PostgresStore under a transaction-scoped advisory lock, after it created `meta`.
CREATE TABLE IF NOT EXISTS meta (
    k TEXT PRIMARY KEY,
    v TEXT NOT NULL
);
CREATE TABLE schedules (
    id           TEXT COLLATE "C" PRIMARY KEY,
    tenant       TEXT NOT NULL,
    channel      TEXT NOT NULL,
    payload      BYTEA NOT NULL,
    payload_kind TEXT NOT NULL,
    headers      TEXT NOT NULL,
    due_ms       BIGINT NOT NULL,
    next_ms      BIGINT NOT NULL,
    bucket       INTEGER NOT NULL,
    status       TEXT NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    claim_epoch  BIGINT,
    claimed_ms   BIGINT,
    created_ms   BIGINT NOT NULL,
    delivered_ms BIGINT,
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
    epoch      BIGINT NOT NULL,
    bucket_lo  INTEGER NOT NULL,
    bucket_hi  INTEGER NOT NULL,
    claimed_ms BIGINT NOT NULL,
    PRIMARY KEY (epoch, bucket_lo, bucket_hi)
);
CREATE TABLE deliveries (
    delivery_id TEXT COLLATE "C" NOT NULL,
    schedule_id TEXT COLLATE "C" NOT NULL,
    attempt     INTEGER NOT NULL,
    epoch       BIGINT NOT NULL,
    started_ms  BIGINT NOT NULL,
    ended_ms    BIGINT NOT NULL,
    outcome     TEXT NOT NULL,
    error       TEXT,
    lateness_ms BIGINT NOT NULL
);
CREATE INDEX deliveries_schedule ON deliveries (schedule_id);
CREATE TABLE channels (
    name   TEXT COLLATE "C" PRIMARY KEY,
    kind   TEXT NOT NULL,
    config TEXT NOT NULL
);
CREATE TABLE beats (
    component TEXT PRIMARY KEY,
    at_ms     BIGINT NOT NULL,
    info      TEXT NOT NULL
);
