-- Schema version 20 (SQLite): interval rules and jitter on recurring schedules. A rule is a
-- cron rule (cron, timezone) or, when every_ms is set, an interval of every_ms from anchor_ms
-- (cron is then '' and timezone the zone its firings are shown in). jitter_ms: each firing's
-- messages are due up to that much later, drawn from the firing's id.
ALTER TABLE recurring ADD COLUMN every_ms INTEGER;
ALTER TABLE recurring ADD COLUMN anchor_ms INTEGER;
ALTER TABLE recurring ADD COLUMN jitter_ms INTEGER NOT NULL DEFAULT 0;
