-- Schema version 3 (SQLite): ordering keys. The enqueue sequence is the table's rowid.
CREATE INDEX schedules_order ON schedules (tenant, ordering_key, due_ms)
    WHERE ordering_key IS NOT NULL AND status IN ('PENDING', 'CLAIMED');
CREATE TABLE halted_keys (
    tenant       TEXT NOT NULL,
    ordering_key TEXT NOT NULL,
    schedule_id  TEXT NOT NULL,
    halted_ms    INTEGER NOT NULL,
    reason       TEXT,
    PRIMARY KEY (tenant, ordering_key)
);
