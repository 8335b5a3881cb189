-- Schema version 15 (SQLite): the partial indexes of finished schedules test the status by
-- equalities, not by an IN list. SQLite tests a list of more than two values through a temporary
-- table that it builds each time it inserts a row or changes its status, here two for every row,
-- whatever its status: an import's INSERT went from 137 000 to 77 000 instructions a row, and
-- from 13.8 to 10.6 us. The queries spell the predicate the same way (stats.FINISHED), as SQLite
-- uses a partial index only for a query that repeats its predicate.
DROP INDEX schedules_done;
CREATE INDEX schedules_done ON schedules (status, channel)
    WHERE (status = 'DELIVERED' OR status = 'CANCELLED' OR status = 'DEAD');
DROP INDEX schedules_finished;
CREATE INDEX schedules_finished ON schedules ((coalesce(delivered_ms, next_ms)), id)
    WHERE (status = 'DELIVERED' OR status = 'CANCELLED' OR status = 'DEAD')
