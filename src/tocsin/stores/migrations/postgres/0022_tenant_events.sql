-- Schema version 22: a tenant's events channel (outcome events of every channel of the tenant
-- that names none of its own; NULL: none).
ALTER TABLE tenants ADD COLUMN events TEXT
