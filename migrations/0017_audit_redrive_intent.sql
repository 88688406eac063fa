-- Why: a re-drive is a call to Temporal, and no transaction may be held
-- across a call to Temporal or a provider (docs/ARCHITECTURE.md). The
-- operator now records the intent first (`redrive_requested`, committed
-- before the call), then calls with a deadline, then records the result as
-- a second row (the table is append-only, so the intent row is never
-- updated): `redrive` (the workflow took it), `redrive_refused` (the
-- workflow refused it, or is not running: nothing ran) or `redrive_unknown`
-- (no answer within the deadline: it may still run). A re-drive that may
-- have run always leaves at least its intent row.
--
-- Online-safe (migrations/README.md): the new CHECK is added NOT VALID, so
-- adding it scans nothing and holds its ACCESS EXCLUSIVE lock only for the
-- catalog change, bounded by lock_timeout. It admits every value the old
-- one did, so every existing row satisfies it; it is not VALIDATEd here,
-- because in this file's transaction VALIDATE would keep that lock for the
-- whole scan. New rows are checked either way.
SET LOCAL lock_timeout = '5s';

ALTER TABLE audit_log
  DROP CONSTRAINT audit_log_action_check,
  ADD CONSTRAINT audit_log_action_check
    CHECK (action IN ('reconcile', 'resolve', 'redrive', 'redrive_requested', 'redrive_refused', 'redrive_unknown'))
    NOT VALID;
