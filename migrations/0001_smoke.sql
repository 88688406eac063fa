-- Why: the foundation's smoke workflow proves the whole stack (Temporal ->
-- worker -> activity -> Postgres) with one row per key derived from the
-- workflow ID. The primary key is what makes a second start harmless.
CREATE TABLE smoke_writes (
  key        text PRIMARY KEY,
  workflow_id text NOT NULL,
  writes     integer NOT NULL DEFAULT 1,
  created_at timestamptz NOT NULL DEFAULT now()
);
