-- Schema version 9: dispatcher runs. Each run of a dispatcher beats its row, and every epoch it
-- takes is recorded with its run, so the claims of a run whose beat stopped (a crash) are
-- released at once instead of after the lease. ready_ms: when the run finished its first
-- batch (its workers started, its channels open), which /readyz waits for.
CREATE TABLE runs (
    run        TEXT PRIMARY KEY,
    started_ms BIGINT NOT NULL,
    beat_ms    BIGINT NOT NULL,
    ready_ms   BIGINT
);
CREATE TABLE epoch_runs (
    epoch    BIGINT PRIMARY KEY,
    run      TEXT NOT NULL,
    taken_ms BIGINT NOT NULL
);
CREATE INDEX epoch_runs_run ON epoch_runs (run)
