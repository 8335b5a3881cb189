-- Schema version 11 (SQLite): finished schedules indexed by (finish time, id), so that the
-- archive reads them a page at a time in that order, each page one range of the index, with
-- no sort of what remains of its span.
DROP INDEX schedules_finished;
CREATE INDEX schedules_finished ON schedules ((coalesce(delivered_ms, next_ms)), id)
    WHERE status IN ('DELIVERED', 'CANCELLED', 'DEAD')
