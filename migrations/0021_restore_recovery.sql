-- Why: recovery after a database restore (issue 28, docs/OPERATIONS.md
-- "Backup and restore"). Restoring the onceflow database to a backup taken at
-- T0 loses every order, refund and ledger record written after T0, while
-- Temporal and the providers keep theirs. `ops recover-after-restore`
-- rebuilds them from Temporal; two things make that possible and safe:
--
-- 1. workflow_outbox.memo: what the accepting request stored for its key (the
--    Idempotency-Key, the fingerprint of the request and the full 202 response).
--    The relay starts the workflow with it as its memo, so Temporal keeps it
--    for as long as it keeps the workflow; the recovery restores the create
--    record from it, and a retry by the client with its original key replays the
--    original answer instead of creating a second order (and a second charge).
-- 2. restore_recoveries: a declared recovery. While one is pending, the API
--    answers new creates with 503 and workers wait before polling, so
--    nothing races the rebuild. Declared by the recovery command itself, or
--    by an API or worker that finds Temporal holding order workflows whose
--    orders the database lacks (src/recovery/detect.ts).
--
-- Online-safe (migrations/README.md): a nullable column with no default (a
-- catalog change) and a new table.
SET LOCAL lock_timeout = '5s';

ALTER TABLE workflow_outbox ADD COLUMN memo json;

CREATE TABLE restore_recoveries (
  id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  -- The time of the backup (T0), when known: what the recovery rebuilds from.
  since        timestamptz,
  declared_by  text        NOT NULL CHECK (length(declared_by) BETWEEN 1 AND 200),
  declared_at  timestamptz NOT NULL DEFAULT now(),
  completed_at timestamptz,
  summary      jsonb
);

-- At most one pending recovery: a second declaration finds it (ON CONFLICT).
CREATE UNIQUE INDEX restore_recoveries_one_pending ON restore_recoveries ((true)) WHERE completed_at IS NULL;

-- Each workflow the recovery rebuilds leaves an audit row (`restore`): what
-- it restored, from which recovery. Added NOT VALID as 0017 did: it admits
-- every earlier value, so no scan is needed.
ALTER TABLE audit_log
  DROP CONSTRAINT audit_log_action_check,
  ADD CONSTRAINT audit_log_action_check
    CHECK (action IN ('reconcile', 'resolve', 'redrive', 'redrive_requested', 'redrive_refused', 'redrive_unknown',
                      'restore'))
    NOT VALID;
