-- Schema version 17: several dispatchers on one store share the buckets. A run records where it
-- runs (host, pid), its checkpoint slot (the lowest free when it joined: its queries keep their
-- checkpoints under it, so dispatchers started with the same settings never share one), the key
-- of the session lock that shows it alive on PostgreSQL, when it stopped being a member
-- (fenced_ms: it left, or missed its beats) and when its claims were released (released_ms).
-- bucket_owners: which run owns each range of buckets, under which generation of the
-- assignment, since when: a claim takes only rows of buckets its epoch's run owns.
-- channel_holds.run: the run of a busy hold's holder, whose claims alone pass the destination
-- over in that run's buckets.
ALTER TABLE runs ADD COLUMN host TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN pid INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN slot INTEGER;
ALTER TABLE runs ADD COLUMN lock_id INTEGER;
ALTER TABLE runs ADD COLUMN fenced_ms INTEGER;
ALTER TABLE runs ADD COLUMN released_ms INTEGER;
CREATE TABLE bucket_owners (
    bucket_lo  INTEGER PRIMARY KEY,
    bucket_hi  INTEGER NOT NULL,
    run        TEXT NOT NULL,
    generation INTEGER NOT NULL,
    since_ms   INTEGER NOT NULL
);
CREATE INDEX bucket_owners_run ON bucket_owners (run);
ALTER TABLE channel_holds ADD COLUMN run TEXT NOT NULL DEFAULT '';
INSERT INTO meta VALUES ('owners_generation', '0')
