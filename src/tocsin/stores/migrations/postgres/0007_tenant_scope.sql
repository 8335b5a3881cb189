-- Schema version 7 (PostgreSQL): tenants own their channels and policies (the same name in two
-- tenants is two of them), API keys, and recurring schedules that failed to expand.
-- Existing channels, policies and tokens belong to the tenant 'default'.
ALTER TABLE channels ADD COLUMN tenant TEXT COLLATE "C" NOT NULL DEFAULT 'default';
ALTER TABLE channels DROP CONSTRAINT channels_pkey;
ALTER TABLE channels ADD PRIMARY KEY (tenant, name);
ALTER TABLE policies ADD COLUMN tenant TEXT COLLATE "C" NOT NULL DEFAULT 'default';
ALTER TABLE policies DROP CONSTRAINT policies_pkey;
ALTER TABLE policies ADD PRIMARY KEY (tenant, name);
ALTER TABLE tokens ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
DROP INDEX tokens_policy;
CREATE INDEX tokens_policy ON tokens (tenant, policy, expires_ms);
-- A policy's waiting schedules, found by (their tenant, the policy's name).
DROP INDEX schedules_policy;
CREATE INDEX schedules_policy ON schedules (tenant, policy, next_ms)
    WHERE status = 'PENDING' AND policy IS NOT NULL;
-- A tenant's waiting schedules, counted for its quota. PENDING only: a claim (PENDING ->
-- CLAIMED) adds no entry here, and the few CLAIMED rows are counted through the lease index.
CREATE INDEX schedules_tenant ON schedules (tenant) WHERE status = 'PENDING';
ALTER TABLE recurring ADD COLUMN failed_reason TEXT;
ALTER TABLE recurring ADD COLUMN failed_ms BIGINT;
CREATE TABLE api_keys (
    id         TEXT COLLATE "C" PRIMARY KEY,
    role       TEXT NOT NULL,
    tenant     TEXT,
    read_only  INTEGER NOT NULL,
    name       TEXT,
    digest     TEXT NOT NULL UNIQUE,
    created_ms BIGINT NOT NULL,
    revoked_ms BIGINT
);
