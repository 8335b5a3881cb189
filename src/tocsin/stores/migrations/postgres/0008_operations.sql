-- Schema version 8 (PostgreSQL): operating Tocsin. A re-driven dead schedule starts a new
-- attempt chain: chain_base is how many attempts came before it (attempt numbers, and so
-- delivery ids, go on counting, the retry limit counts the chain's own attempts). Paused
-- channels' schedules wait unclaimed. Counters are summed at scrape from rows that each
-- acknowledgement adds to in its own transaction (a few shards per counter, so concurrent
-- dispatchers rarely wait on one row's lock).
ALTER TABLE schedules ADD COLUMN chain_base INTEGER NOT NULL DEFAULT 0;
CREATE TABLE paused_channels (
    tenant    TEXT COLLATE "C" NOT NULL,
    name      TEXT COLLATE "C" NOT NULL,
    paused_ms BIGINT NOT NULL,
    PRIMARY KEY (tenant, name)
);
CREATE TABLE counters (
    name   TEXT COLLATE "C" NOT NULL,
    labels TEXT COLLATE "C" NOT NULL,
    shard  INTEGER NOT NULL,
    value  BIGINT NOT NULL,
    PRIMARY KEY (name, labels, shard)
);
CREATE INDEX schedules_dead_due ON schedules (due_ms) WHERE status = 'DEAD';
