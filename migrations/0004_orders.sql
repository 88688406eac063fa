-- Why: the order row is the user-facing projection of an order workflow.
-- The workflow's setOrderStatus activity writes `status` in the same
-- transaction as its ledger record; `status_seq` only ever grows, so a late
-- or duplicate transition can never move an order backwards.
CREATE TABLE tenants (
  id         text PRIMARY KEY,
  name       text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE orders (
  tenant_id      text NOT NULL REFERENCES tenants (id),
  id             text NOT NULL,
  workflow_id    text NOT NULL UNIQUE,
  status         text NOT NULL DEFAULT 'accepted' CHECK (status IN (
                   'accepted', 'payment_pending', 'payment_unknown', 'paid',
                   'completed', 'rejected', 'needs_attention')),
  status_seq     integer NOT NULL DEFAULT 0,
  amount         bigint NOT NULL CHECK (amount >= 0),
  currency       text NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
  customer_id    text NOT NULL,
  customer_email text NOT NULL,
  items          jsonb NOT NULL,
  payment_method text NOT NULL,
  charge_id      text,
  receipt_id     text,
  last_error     text,
  created_at     timestamptz NOT NULL DEFAULT now(),
  updated_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, id)
);

-- Listing by tenant and status with cursor pagination on (created_at, id).
CREATE INDEX orders_tenant_status_created ON orders (tenant_id, status, created_at, id);
CREATE INDEX orders_tenant_created ON orders (tenant_id, created_at, id);
-- Operators and metrics count orders needing a human across tenants.
CREATE INDEX orders_status ON orders (status);

-- Demo tenants for local use; production tenants are added with `npm run ops -- tenant:add`.
INSERT INTO tenants (id, name) VALUES ('acme', 'Acme Corp (demo)'), ('globex', 'Globex (demo)');
