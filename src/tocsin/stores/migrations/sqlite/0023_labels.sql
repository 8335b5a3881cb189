-- Schema version 23 (SQLite): labels on schedules and recurring rules (docs/api.md, "Labels").
-- schedules.labels and recurring.labels: compact JSON of the key=value pairs, NULL for none.
-- schedule_labels indexes each pair of each labelled schedule, so a label selector reads the
-- matching ids through the index. Triggers keep it, whatever writes a schedule (create,
-- import, expansion, backfill) or deletes one (archive); labels never change after creation.
ALTER TABLE schedules ADD COLUMN labels TEXT;
ALTER TABLE recurring ADD COLUMN labels TEXT;
CREATE TABLE schedule_labels (
    tenant      TEXT NOT NULL,
    key         TEXT NOT NULL,
    value       TEXT NOT NULL,
    schedule_id TEXT NOT NULL,
    PRIMARY KEY (tenant, key, value, schedule_id)
) WITHOUT ROWID;
CREATE INDEX schedule_labels_schedule ON schedule_labels (schedule_id);
CREATE TRIGGER schedules_labels_insert AFTER INSERT ON schedules
    WHEN new.labels IS NOT NULL
BEGIN
    INSERT INTO schedule_labels SELECT new.tenant, j.key, j.value, new.id
        FROM json_each(new.labels) AS j WHERE true ON CONFLICT DO NOTHING;
END;
CREATE TRIGGER schedules_labels_delete AFTER DELETE ON schedules
    WHEN old.labels IS NOT NULL
BEGIN
    DELETE FROM schedule_labels WHERE schedule_id = old.id;
END;
