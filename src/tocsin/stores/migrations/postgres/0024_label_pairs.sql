-- Schema version 24 (PostgreSQL): schedule_labels_pair, the label index by pair alone (key,
-- value, schedule id). The primary key (tenant, key, value, schedule id) serves a tenant's
-- selector; an admin's selector across every tenant (every caller, when no API key is
-- configured) read every entry of the table through it. Each pair's entries come in id
-- order, so a page of a selector reads a page of them (docs/api.md, "Labels").
CREATE INDEX schedule_labels_pair ON schedule_labels (key, value, schedule_id);
