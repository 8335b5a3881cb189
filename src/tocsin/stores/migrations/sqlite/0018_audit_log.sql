-- Schema version 18 (SQLite): the audit log. One row per change made through the API or the
-- dashboard to a channel, a key, a policy, a rule, a tenant's settings, a pause or resume, a
-- bulk operation or a re-drive: who (the key's id and tenant), what (the method and route,
-- the path acted on, the answer's status), when, and from where (the client's address). No
-- request body is kept (it may hold a secret). Kept as long as finished schedules are, and
-- archived with them.
CREATE TABLE audit_log (
    id         TEXT PRIMARY KEY,
    at_ms      INTEGER NOT NULL,
    key_id     TEXT,
    key_tenant TEXT,
    tenant     TEXT,
    action     TEXT NOT NULL,
    target     TEXT NOT NULL,
    status     INTEGER NOT NULL,
    client     TEXT,
    detail     TEXT
);
CREATE INDEX audit_log_at ON audit_log (at_ms);
