-- Schema version 21 (SQLite): delivery terms and the EXPIRED status. terms: a schedule's (and a
-- recurring schedule's, for each firing) delivery terms as versioned JSON (expires_ms,
-- max_lateness_ms, retry), NULL for none. chain_ms: when the attempt chain's first attempt
-- started, set by its first retry (a re-drive clears it), for max_retry_duration. EXPIRED is a
-- finished status: the finished indexes take it (the queries spell the predicate the same way,
-- rows.FINISHED).
ALTER TABLE schedules ADD COLUMN terms TEXT;
ALTER TABLE schedules ADD COLUMN chain_ms INTEGER;
ALTER TABLE recurring ADD COLUMN terms TEXT;
DROP INDEX schedules_done;
CREATE INDEX schedules_done ON schedules (status, channel)
    WHERE (status = 'DELIVERED' OR status = 'CANCELLED' OR status = 'DEAD' OR status = 'EXPIRED');
DROP INDEX schedules_finished;
CREATE INDEX schedules_finished ON schedules ((coalesce(delivered_ms, next_ms)), id)
    WHERE (status = 'DELIVERED' OR status = 'CANCELLED' OR status = 'DEAD' OR status = 'EXPIRED')
