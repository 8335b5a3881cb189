-- Schema version 13 (PostgreSQL): bulkheads. A channel of a tenant (a destination) that the
-- dispatcher holds is passed over by the claim until the hold ends: its circuit breaker is open
-- (reason 'open', until the probe: one row, holder '') or its lane in a dispatcher process is full
-- (reason 'busy': a row per process, holder naming it, so one process's emptied lane never ends
-- another's hold).
-- A hold whose until_ms has passed is deleted by the dispatcher's driver. Tenants get a weight:
-- their share of a lane's room while other tenants have work due.
CREATE TABLE channel_holds (
    tenant     TEXT COLLATE "C" NOT NULL,
    name       TEXT COLLATE "C" NOT NULL,
    reason     TEXT NOT NULL,
    since_ms   BIGINT NOT NULL,
    until_ms   BIGINT NOT NULL,
    failures   INTEGER NOT NULL,
    last_error TEXT,
    holder     TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, name, holder)
);
ALTER TABLE tenants ADD COLUMN weight INTEGER NOT NULL DEFAULT 1
