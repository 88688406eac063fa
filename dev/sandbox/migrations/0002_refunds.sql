-- Why: the sandbox provider refunds charges (issue 27): POST /v1/refunds under
-- an Idempotency-Key, a lookup by that key for reconciliation, fault injection
-- on `refunds.create` and `refunds.lookup`, and an audit list at
-- GET /_sandbox/refunds. The idempotency claims and faults tables take the new
-- scope and endpoints: their CHECKs are replaced by wider ones (every existing
-- row satisfies them, so NOT VALID skips a scan that could only pass).
CREATE TABLE IF NOT EXISTS sandbox.refunds (
  id              text        PRIMARY KEY,
  account         text        NOT NULL,
  idempotency_key text        NOT NULL,
  charge_id       text        NOT NULL,
  amount          integer     NOT NULL CHECK (amount > 0),
  currency        text        NOT NULL,
  status          text        NOT NULL CHECK (status IN ('succeeded', 'failed')),
  reason          text,
  metadata        jsonb       NOT NULL DEFAULT '{}',
  created_at      timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS refunds_key_idx ON sandbox.refunds (account, idempotency_key, created_at DESC);
CREATE INDEX IF NOT EXISTS refunds_charge_idx ON sandbox.refunds (account, charge_id);
CREATE INDEX IF NOT EXISTS refunds_order_idx ON sandbox.refunds (account, (metadata ->> 'order_id'));

ALTER TABLE sandbox.idempotency_keys DROP CONSTRAINT IF EXISTS idempotency_keys_scope_check;
ALTER TABLE sandbox.idempotency_keys ADD CONSTRAINT idempotency_keys_scope_check
  CHECK (scope IN ('charges', 'messages', 'refunds')) NOT VALID;

ALTER TABLE sandbox.faults DROP CONSTRAINT IF EXISTS faults_endpoint_check;
ALTER TABLE sandbox.faults ADD CONSTRAINT faults_endpoint_check
  CHECK (endpoint IN ('charges.create', 'charges.lookup', 'messages.create', 'messages.lookup',
                      'refunds.create', 'refunds.lookup')) NOT VALID;
