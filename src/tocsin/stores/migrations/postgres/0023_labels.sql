-- Schema version 23 (PostgreSQL): labels on schedules and recurring rules (docs/api.md,
-- "Labels"). schedules.labels and recurring.labels: compact JSON of the key=value pairs, NULL
-- for none. schedule_labels indexes each pair of each labelled schedule, so a label selector
-- reads the matching ids through the index. Statement triggers keep it (one per statement, a
-- COPY's too), whatever writes a schedule or deletes one; labels never change after creation.
ALTER TABLE schedules ADD COLUMN labels TEXT;
ALTER TABLE recurring ADD COLUMN labels TEXT;
CREATE TABLE schedule_labels (
    tenant      TEXT COLLATE "C" NOT NULL,
    key         TEXT COLLATE "C" NOT NULL,
    value       TEXT COLLATE "C" NOT NULL,
    schedule_id TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant, key, value, schedule_id)
);
CREATE INDEX schedule_labels_schedule ON schedule_labels (schedule_id);
CREATE FUNCTION tocsin_labels_inserted() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO schedule_labels
        SELECT i.tenant, l.key, l.value, i.id
        FROM inserted i, jsonb_each_text(i.labels::jsonb) l
        WHERE i.labels IS NOT NULL
        ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
CREATE TRIGGER schedules_labels_insert AFTER INSERT ON schedules
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION tocsin_labels_inserted();
CREATE FUNCTION tocsin_labels_deleted() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM schedule_labels sl USING deleted d
        WHERE d.labels IS NOT NULL AND sl.schedule_id = d.id;
    RETURN NULL;
END $$;
CREATE TRIGGER schedules_labels_delete AFTER DELETE ON schedules
    REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT EXECUTE FUNCTION tocsin_labels_deleted();
