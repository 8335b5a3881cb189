-- Schema version 16 (SQLite): a wake-up time per destination.
--
-- PostgreSQL's version 16 also moves names to COLLATE "C" and sets the queue's vacuum: here
-- text compares in BINARY (byte order) already, so no index changes order and none needs
-- rebuilding, and SQLite reuses freed pages without a vacuum.
--
-- A wake-up time per destination (a channel of a tenant): never later than its earliest
-- unthrottled PENDING schedule. The claim lists the destinations whose wake-up time has come
-- (a range of destinations_wake) instead of every destination with a schedule pending, so idle
-- destinations cost it nothing. Triggers keep the bound whatever writes a schedule (create,
-- import, retry, hand-back, re-drive, reschedule); the claim raises it (stores/sql/fair.py).
-- 2^62: nothing pending.
CREATE TABLE destinations (
    tenant  TEXT NOT NULL,
    channel TEXT NOT NULL,
    wake_ms INTEGER NOT NULL,
    PRIMARY KEY (tenant, channel)
) WITHOUT ROWID;
CREATE INDEX destinations_wake ON destinations (wake_ms, tenant, channel);
-- The index of PENDING schedules by time alone goes: no statement reads it any more (the
-- claim, the wake-up and the window's peek go by destination, the reads of upcoming
-- schedules by time do not exclude throttled ones), and a planner with stale statistics took it
-- for a destination's share, reading every other destination's rows due in between.
DROP INDEX schedules_next;
INSERT INTO destinations
    SELECT tenant, channel, min(next_ms) FROM schedules
    WHERE status = 'PENDING' AND policy IS NULL GROUP BY tenant, channel;
CREATE TRIGGER schedules_wake_insert AFTER INSERT ON schedules
    WHEN new.status = 'PENDING' AND new.policy IS NULL
BEGIN
    INSERT INTO destinations SELECT new.tenant, new.channel, new.next_ms WHERE true
        ON CONFLICT (tenant, channel) DO UPDATE SET wake_ms = excluded.wake_ms
        WHERE excluded.wake_ms < destinations.wake_ms;
END;
CREATE TRIGGER schedules_wake_update AFTER UPDATE ON schedules
    WHEN new.status = 'PENDING' AND new.policy IS NULL
        AND (old.status <> 'PENDING' OR old.policy IS NOT NULL OR new.next_ms < old.next_ms
             OR new.tenant <> old.tenant OR new.channel <> old.channel)
BEGIN
    INSERT INTO destinations SELECT new.tenant, new.channel, new.next_ms WHERE true
        ON CONFLICT (tenant, channel) DO UPDATE SET wake_ms = excluded.wake_ms
        WHERE excluded.wake_ms < destinations.wake_ms;
END
