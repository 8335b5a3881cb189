-- Schema version 7 (SQLite): tenants own their channels and policies (the same name in two
-- tenants is two of them), API keys, and recurring schedules that failed to expand.
-- Existing channels, policies and tokens belong to the tenant 'default'.
CREATE TABLE channels_v7 (
    tenant TEXT NOT NULL,
    name   TEXT NOT NULL,
    kind   TEXT NOT NULL,
    config TEXT NOT NULL,
    PRIMARY KEY (tenant, name)
);
INSERT INTO channels_v7 (tenant, name, kind, config)
    SELECT 'default', name, kind, config FROM channels;
DROP TABLE channels;
ALTER TABLE channels_v7 RENAME TO channels;
CREATE TABLE policies_v7 (
    tenant         TEXT NOT NULL,
    name           TEXT NOT NULL,
    max_in_flight  INTEGER NOT NULL,
    rate           REAL,
    token_lease_ms INTEGER NOT NULL,
    rate_tokens    REAL NOT NULL,
    rate_ms        INTEGER NOT NULL,
    created_ms     INTEGER NOT NULL,
    PRIMARY KEY (tenant, name)
);
INSERT INTO policies_v7 (tenant, name, max_in_flight, rate, token_lease_ms, rate_tokens,
                         rate_ms, created_ms)
    SELECT 'default', name, max_in_flight, rate, token_lease_ms, rate_tokens, rate_ms,
           created_ms FROM policies;
DROP TABLE policies;
ALTER TABLE policies_v7 RENAME TO policies;
ALTER TABLE tokens ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
DROP INDEX tokens_policy;
CREATE INDEX tokens_policy ON tokens (tenant, policy, expires_ms);
-- A policy's waiting schedules, found by (their tenant, the policy's name).
DROP INDEX schedules_policy;
CREATE INDEX schedules_policy ON schedules (tenant, policy, next_ms)
    WHERE status = 'PENDING' AND policy IS NOT NULL;
-- A tenant's waiting schedules, counted for its quota. PENDING only: a claim (PENDING ->
-- CLAIMED) leaves the index alone, and the few CLAIMED rows are counted through the lease index.
CREATE INDEX schedules_tenant ON schedules (tenant) WHERE status = 'PENDING';
ALTER TABLE recurring ADD COLUMN failed_reason TEXT;
ALTER TABLE recurring ADD COLUMN failed_ms INTEGER;
CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY,
    role       TEXT NOT NULL,
    tenant     TEXT,
    read_only  INTEGER NOT NULL,
    name       TEXT,
    digest     TEXT NOT NULL UNIQUE,
    created_ms INTEGER NOT NULL,
    revoked_ms INTEGER
)
