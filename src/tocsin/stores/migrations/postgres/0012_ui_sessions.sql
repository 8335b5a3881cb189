-- Schema version 12 (PostgreSQL): the dashboard's sessions, kept server-side. The browser holds
-- a random session token, the store keeps its SHA-256 digest, the digest of the API key it was
-- opened with (a revoked key ends its sessions) and when it expires. Signing out deletes it.
CREATE TABLE ui_sessions (
    digest     TEXT COLLATE "C" PRIMARY KEY,
    key_digest TEXT COLLATE "C" NOT NULL,
    created_ms BIGINT NOT NULL,
    expires_ms BIGINT NOT NULL
);
CREATE INDEX ui_sessions_expiry ON ui_sessions (expires_ms);
