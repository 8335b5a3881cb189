-- Schema version 5 (PostgreSQL): tenant settings. A tenant without a row has the defaults.
CREATE TABLE tenants (
    name       TEXT PRIMARY KEY,
    durability TEXT NOT NULL,
    updated_ms BIGINT NOT NULL
);
