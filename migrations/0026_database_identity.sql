-- Why: restore detection must tell a restored database from a different one
-- (issue 44). An API or worker that finds Temporal's order workflows without
-- their order rows declares a restore and closes the gate
-- (src/recovery/gate.ts); a new database beside a Temporal server that still
-- holds an earlier database's workflows (a dev database dropped and created
-- again, several staging databases on one server) looked the same, and its
-- workers never polled. This row is the database's identity: made once, with
-- the schema, so a backup and every restore of it keep it, and a new database
-- has another. The outbox relay writes it into the memo of every workflow it
-- starts (src/recovery/memo.ts).
--
-- Online-safe (migrations/README.md): a new table.
CREATE TABLE database_identity (
  -- At most one row: the primary key admits only true.
  singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
  id         uuid        NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);

-- Derived from when this database's first migration ran, not random: a backup taken before this
-- file, restored and migrated again, gets back the identity its workflows carry (a random one
-- would make them look like another database's). A new database ran 0001 at another instant.
INSERT INTO database_identity (id)
SELECT coalesce(
  (SELECT md5('onceflow database ' || extract(epoch FROM run_on)::text)::uuid
     FROM pgmigrations WHERE name = '0001_smoke'),
  gen_random_uuid());
