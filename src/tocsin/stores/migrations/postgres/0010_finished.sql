-- Schema version 10 (PostgreSQL): when a schedule finished, and recent attempts, by index:
-- GET /v1/stats counts what finished in a window and the lateness of recent deliveries, and the
-- archive finds what finished before its retention, each by one bounded range scan. A finished
-- schedule's time is delivered_ms when DELIVERED, next_ms otherwise (a cancel sets it to the
-- cancel's time, a dead schedule keeps its last attempt's due time).
CREATE INDEX schedules_finished ON schedules ((coalesce(delivered_ms, next_ms)))
    WHERE status IN ('DELIVERED', 'CANCELLED', 'DEAD');
CREATE INDEX deliveries_ended ON deliveries (ended_ms)
