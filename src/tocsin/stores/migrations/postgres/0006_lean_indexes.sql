-- Schema version 6 (PostgreSQL): fewer index writes on the dispatch path. An update that changes
-- an indexed column adds an entry to every index whose predicate the new row meets, so claiming
-- a schedule (PENDING -> CLAIMED) and acknowledging it (-> DELIVERED) each wrote the status
-- index, and a claim also wrote the per-epoch index, which served only the rare replay of a
-- batch (the lease index serves that too). Finished schedules keep a status index (counts and
-- listing), while pending and claimed ones are counted through their own partial indexes.
DROP INDEX schedules_claimed;
DROP INDEX schedules_status;
CREATE INDEX schedules_done ON schedules (status, channel)
    WHERE status IN ('DELIVERED', 'CANCELLED', 'DEAD')
