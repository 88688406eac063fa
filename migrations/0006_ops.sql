-- Why: operators recover uncertain work by hand (reconcile, resolve an
-- unknown outcome, re-drive an order). Every such action is written here:
-- who, what, why, and the state before and after, in the same transaction as
-- the change wherever the change is a local write. The table is append-only
-- in the database itself, not only by convention: a trigger refuses UPDATE,
-- DELETE and TRUNCATE, so neither a bug nor a hurried operator can rewrite
-- history. (Dropping the trigger needs a schema change, which is reviewed.)
CREATE TABLE audit_log (
  id             bigserial   PRIMARY KEY,
  created_at     timestamptz NOT NULL DEFAULT now(),
  -- Who: a person's name (CLI: --actor or the OS user; API: the request's actor field).
  actor          text        NOT NULL CHECK (length(btrim(actor)) > 0),
  -- Where the action came from: 'cli' or 'api'.
  source         text        NOT NULL CHECK (source IN ('cli', 'api')),
  action         text        NOT NULL CHECK (action IN ('reconcile', 'resolve', 'redrive')),
  -- Why. Required for decisions (resolve, redrive); optional for reconcile, which only asks the provider.
  reason         text,
  tenant_id      text        NOT NULL,
  -- The operation acted on (reconcile, resolve); NULL for an order-level action (redrive).
  operation_type text,
  operation_key  text,
  workflow_id    text,
  before         jsonb,
  after          jsonb,
  CONSTRAINT audit_log_reason_check CHECK (action = 'reconcile' OR length(btrim(coalesce(reason, ''))) > 0),
  CONSTRAINT audit_log_operation_check CHECK ((operation_type IS NULL) = (operation_key IS NULL))
);

CREATE INDEX audit_log_operation_idx ON audit_log (tenant_id, operation_type, operation_key, id);
CREATE INDEX audit_log_key_idx ON audit_log (operation_key, id);
CREATE INDEX audit_log_workflow_idx ON audit_log (workflow_id, id);

CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'audit_log is append-only: % is not allowed', TG_OP
    USING ERRCODE = 'insufficient_privilege';
END;
$$;

CREATE TRIGGER audit_log_no_update_delete
  BEFORE UPDATE OR DELETE ON audit_log
  FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();

CREATE TRIGGER audit_log_no_truncate
  BEFORE TRUNCATE ON audit_log
  FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();
