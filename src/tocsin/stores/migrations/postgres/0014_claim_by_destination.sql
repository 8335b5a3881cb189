-- Schema version 14 (PostgreSQL): the claim goes destination by destination (a channel of a tenant), so a
-- held burst of one destination is passed over without reading its rows, and each claim shares
-- its rows between the destinations that have work due. The index by bucket and time, which no
-- statement used since the claim read schedules_next, makes room for it.
DROP INDEX schedules_pending;
CREATE INDEX schedules_dest ON schedules (tenant, channel, next_ms)
    WHERE status = 'PENDING' AND policy IS NULL
