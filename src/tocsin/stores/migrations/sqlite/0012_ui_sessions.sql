-- Schema version 12 (SQLite): the dashboard's sessions, kept server-side. The browser holds a
-- random session token, the store keeps its SHA-256 digest, the digest of the API key it was
-- opened with (a revoked key ends its sessions) and when it expires. Signing out deletes it.
CREATE TABLE ui_sessions (
    digest     TEXT PRIMARY KEY,
    key_digest TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL
);
CREATE INDEX ui_sessions_expiry ON ui_sessions (expires_ms);
