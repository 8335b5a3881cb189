-- Schema version 24 (SQLite): schedule_labels_pair, the label index by pair alone (key, value,
-- schedule id). The primary key (tenant, key, value, schedule id) serves a tenant's selector;
-- an admin's selector across every tenant (every caller, when no API key is configured)
-- scanned the whole table through it (400 000 labelled schedules: 80 ms a page, against
-- 0.8 ms by this index). Each pair's entries come in id order, so a page of a selector reads
-- a page of them (docs/api.md, "Labels").
CREATE INDEX schedule_labels_pair ON schedule_labels (key, value, schedule_id);
