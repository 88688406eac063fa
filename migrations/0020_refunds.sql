-- Why: refunds (issue 27). One row per refund, the user-facing projection of
-- its refund workflow (refund/<tenant>/<id>), as orders are of theirs. A
-- refund has no natural key (two real refunds of one amount are two refunds);
-- the limit is the order's charge, held in orders.refunded_amount (0018): the
-- API reserves a refund's amount there with a conditional update in the same
-- transaction as this row, and the one transition into `failed` releases it.
--
-- Online-safe (migrations/README.md): a new table. Its foreign key to orders
-- takes a SHARE ROW EXCLUSIVE lock on orders for an instant (nothing to
-- validate: the table is empty), bounded by lock_timeout.
SET LOCAL lock_timeout = '5s';

CREATE TABLE refunds (
  tenant_id          text        NOT NULL,
  id                 text        NOT NULL,
  order_id           text        NOT NULL,
  workflow_id        text        NOT NULL UNIQUE,
  amount             bigint      NOT NULL CHECK (amount >= 1),
  currency           text        NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
  reason             text        CHECK (reason ~ '^[\x21-\x7e]{1,200}$'),
  status             text        NOT NULL DEFAULT 'pending' CHECK (status IN (
                       'pending', 'succeeded', 'failed', 'refund_unknown', 'needs_attention')),
  status_seq         integer     NOT NULL DEFAULT 0,
  provider_refund_id text,
  last_error         text,
  created_at         timestamptz NOT NULL DEFAULT now(),
  updated_at         timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, id),
  FOREIGN KEY (tenant_id, order_id) REFERENCES orders (tenant_id, id)
);

-- An order's refunds, newest first (GET /v1/orders/{id}/refunds).
CREATE INDEX refunds_order ON refunds (tenant_id, order_id, created_at, id);
-- Operators and metrics: refunds by status across tenants.
CREATE INDEX refunds_status ON refunds (status);

-- GET /v1/orders/{id}/refunds/{refundId}?wait= long-polls through the API's
-- listener on `order_status` (src/api/order-waits.ts), woken by a terminal
-- refund status as an order's is by its own. The payload is the refund ID
-- alone (no status): the listener wakes the waiters of an ID without a status
-- unconditionally, and only terminal refund statuses notify. Refund and order
-- IDs never collide (re_ and ord_ prefixes).
CREATE FUNCTION notify_refund_status() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('order_status', NEW.id);
  RETURN NULL;
END;
$$;

CREATE TRIGGER refunds_status_notify
  AFTER UPDATE OF status ON refunds
  FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status
        AND NEW.status IN ('succeeded', 'failed', 'needs_attention'))
  EXECUTE FUNCTION notify_refund_status();
