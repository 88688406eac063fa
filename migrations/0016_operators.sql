-- Why: the audit log's "who" came from the request body: any holder of the
-- one shared admin token could write any name into it. Each operator now
-- gets a named credential (`npm run ops -- operator add NAME`), and the admin
-- API takes the audit actor from the credential, never from the request.
--
--  * operators: one row per named credential. Only the SHA-256 of the token
--    is stored (the plaintext is printed once), so a database dump does not
--    leak a usable credential. A name is never reused: revoking keeps the row
--    (revoked_at), so old audit rows keep pointing at one person. Lookups are
--    by token hash (the API) and by name (the CLI), both unique.
--  * audit_log.actor_credential: how the actor was established, so a reader
--    can tell a verified name from a claimed one:
--      'operator_token' - the API, a named operator's token: actor = its name;
--      'admin_token'    - the API, the shared ONCEFLOW_ADMIN_TOKEN (bootstrap):
--                         actor is always 'admin-token', never a claimed name;
--      'self_declared'  - the CLI, which runs with direct database access:
--                         actor is --actor or the OS user, as claimed.
--    Rows written before this migration are 'self_declared': the API took
--    their actor from the request body.
--
-- Online-safe (migrations/README.md): a new table, and a column whose default
-- is a constant (a catalog change: no rewrite, no scan). Its CHECK is added
-- NOT VALID, so nothing is scanned either (every existing row holds the
-- default, which satisfies it); new rows are checked. lock_timeout bounds the
-- wait for audit_log's lock.
SET LOCAL lock_timeout = '5s';

CREATE TABLE operators (
  name        text        PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$'),
  token_hash  text        NOT NULL UNIQUE CHECK (token_hash ~ '^[0-9a-f]{64}$'),
  created_at  timestamptz NOT NULL DEFAULT now(),
  revoked_at  timestamptz
);

ALTER TABLE audit_log
  ADD COLUMN actor_credential text NOT NULL DEFAULT 'self_declared',
  ADD CONSTRAINT audit_log_actor_credential_check
    CHECK (actor_credential IN ('operator_token', 'admin_token', 'self_declared')) NOT VALID;
