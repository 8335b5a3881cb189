-- Schema version 16 (PostgreSQL): names in byte order, a wake-up time per destination, and the
-- queue's vacuum settings.
--
-- 1. Tenants, channels, keys, ordering keys, policy names, a schedule's status and its
--    recurring schedule's id (every text column of the schedules' indexes) compare in
--    COLLATE "C" (byte order, as SQLite's BINARY), whatever locale the database was created
--    with: under a linguistic locale every comparison in the key and destination indexes went
--    through the locale's rules (slower, and an ordering that changes when the C library is
--    upgraded, which silently corrupts such indexes). A change of collation rewrites no table; PostgreSQL
--    rebuilds every index on these columns, holding the table's lock meanwhile
--    (docs/deploy.md#upgrades).
ALTER TABLE schedules
    ALTER COLUMN tenant TYPE TEXT COLLATE "C",
    ALTER COLUMN channel TYPE TEXT COLLATE "C",
    ALTER COLUMN key TYPE TEXT COLLATE "C",
    ALTER COLUMN ordering_key TYPE TEXT COLLATE "C",
    ALTER COLUMN policy TYPE TEXT COLLATE "C",
    ALTER COLUMN status TYPE TEXT COLLATE "C",
    ALTER COLUMN recurring_id TYPE TEXT COLLATE "C";
ALTER TABLE recurring
    ALTER COLUMN tenant TYPE TEXT COLLATE "C",
    ALTER COLUMN channel TYPE TEXT COLLATE "C",
    ALTER COLUMN policy TYPE TEXT COLLATE "C";
ALTER TABLE halted_keys
    ALTER COLUMN tenant TYPE TEXT COLLATE "C",
    ALTER COLUMN ordering_key TYPE TEXT COLLATE "C";
ALTER TABLE tokens
    ALTER COLUMN tenant TYPE TEXT COLLATE "C",
    ALTER COLUMN policy TYPE TEXT COLLATE "C";
ALTER TABLE tenants ALTER COLUMN name TYPE TEXT COLLATE "C";
ALTER TABLE api_keys ALTER COLUMN tenant TYPE TEXT COLLATE "C";

-- 2. A wake-up time per destination (a channel of a tenant): never later than its earliest
--    unthrottled PENDING schedule. The claim lists the destinations whose wake-up time has
--    come (a range of destinations_wake) instead of every destination with a schedule
--    pending, so idle destinations cost it nothing. Triggers keep the bound whatever writes a
--    schedule (create, import, retry, hand-back, re-drive, reschedule); the claim raises it
--    (stores/sql/fair.py). 2^62: nothing pending.
CREATE TABLE destinations (
    tenant  TEXT COLLATE "C" NOT NULL,
    channel TEXT COLLATE "C" NOT NULL,
    wake_ms BIGINT NOT NULL,
    PRIMARY KEY (tenant, channel)
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
        autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 1000);
CREATE INDEX destinations_wake ON destinations (wake_ms, tenant, channel);
-- The index of PENDING schedules by time alone goes: no statement reads it any more (the
-- claim, the wake-up and the window's peek go by destination, the reads of upcoming
-- schedules by time do not exclude throttled ones), and a planner with stale statistics took it
-- for a destination's share, reading every other destination's rows due in between.
DROP INDEX schedules_next;
INSERT INTO destinations
    SELECT tenant, channel, min(next_ms) FROM schedules
    WHERE status = 'PENDING' AND policy IS NULL GROUP BY tenant, channel;

-- The functions keep the search_path they were created with (Tocsin's schema), so a write to
-- the schedules from a session with another search_path finds the destinations too.
-- A schedule of destination (t, c) pending from x: lower the wake-up time to x, or hold it
-- (a share lock until commit) where it is already x or earlier, so that a claim raising it
-- meanwhile (FOR UPDATE SKIP LOCKED, then a fresh read) either waits for this row or skips it.
CREATE FUNCTION tocsin_wake(t TEXT, c TEXT, x BIGINT) RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE destinations SET wake_ms = x WHERE tenant = t AND channel = c AND wake_ms > x;
    IF FOUND THEN
        RETURN;
    END IF;
    PERFORM 1 FROM destinations WHERE tenant = t AND channel = c AND wake_ms <= x FOR SHARE;
    IF FOUND THEN
        RETURN;
    END IF;
    INSERT INTO destinations VALUES (t, c, x) ON CONFLICT (tenant, channel)
        DO UPDATE SET wake_ms = least(destinations.wake_ms, excluded.wake_ms);
END $$;

-- Inserts (COPY included): one call per destination of the statement, in order (no two
-- statements lock two destinations in opposite orders).
CREATE FUNCTION tocsin_wake_inserted() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    r RECORD;
BEGIN
    FOR r IN SELECT tenant, channel, min(next_ms) AS x FROM inserted
             WHERE status = 'PENDING' AND policy IS NULL
             GROUP BY tenant, channel ORDER BY tenant, channel LOOP
        PERFORM tocsin_wake(r.tenant, r.channel, r.x);
    END LOOP;
    RETURN NULL;
END $$;
CREATE TRIGGER schedules_wake_insert AFTER INSERT ON schedules
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION tocsin_wake_inserted();

-- Updates: only a row that becomes PENDING and unthrottled, or moves earlier while it is
-- (a retry, a hand-back, a re-drive, a reschedule); the claim and the acknowledgement do not
-- fire it.
CREATE FUNCTION tocsin_wake_updated() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM tocsin_wake(NEW.tenant, NEW.channel, NEW.next_ms);
    RETURN NULL;
END $$;
CREATE TRIGGER schedules_wake_update AFTER UPDATE ON schedules FOR EACH ROW
    WHEN (NEW.status = 'PENDING' AND NEW.policy IS NULL
          AND (OLD.status <> 'PENDING' OR OLD.policy IS NOT NULL OR NEW.next_ms < OLD.next_ms
               OR NEW.tenant <> OLD.tenant OR NEW.channel <> OLD.channel))
    EXECUTE FUNCTION tocsin_wake_updated();

-- 3. The queue table's vacuum: every schedule leaves two dead row versions within seconds
--    (claimed, then acknowledged), and each stays in the indexes until vacuum removes it.
--    Vacuum after 1 000 + 2 % of the rows are dead (the default, 20 %, let a table of 10
--    million rows carry 2 million), and analyze as often (the planner's view of a queue goes
--    stale in seconds). fillfactor 90: a claim's or an acknowledgement's new row version finds
--    room on its own page, one page written instead of two (no update of a status is HOT:
--    status is in the partial indexes' predicates).
ALTER TABLE schedules SET (fillfactor = 90, autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000, autovacuum_analyze_scale_factor = 0.02,
    autovacuum_analyze_threshold = 1000, autovacuum_vacuum_insert_scale_factor = 0.05);
ALTER TABLE claims SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
ALTER TABLE counters SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000)
