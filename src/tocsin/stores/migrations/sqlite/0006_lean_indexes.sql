-- Schema version 6 (SQLite): fewer index writes on the dispatch path. Claiming a schedule
-- (PENDING -> CLAIMED) and acknowledging it (-> DELIVERED) each rewrote the status index.
-- Finished schedules keep a status index (counts and listing), while pending and claimed ones are
-- counted through their own partial indexes.
DROP INDEX schedules_status;
CREATE INDEX schedules_done ON schedules (status, channel)
    WHERE status IN ('DELIVERED', 'CANCELLED', 'DEAD')
