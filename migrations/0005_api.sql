-- Why: the HTTP API needs three things of its own.
--  * api_keys: bearer keys map to a tenant. Only a SHA-256 of the key is
--    stored, so a database dump does not leak usable credentials.
--  * workflow_outbox: the intent to start an order's workflow commits in the
--    same transaction as the order row and the Idempotency-Key record. A relay
--    starts every unstarted row, so a crash between commit and start never
--    loses an order; the deterministic workflow ID makes a repeated start
--    harmless.
--  * webhook_events: provider events are recorded by (provider, event id,
--    consumer) in the same transaction as their processing, so each consumer
--    acts on an event once and one consumer's marker never hides an event
--    from another.
CREATE TABLE api_keys (
  key_hash     text PRIMARY KEY CHECK (key_hash ~ '^[0-9a-f]{64}$'),
  tenant_id    text NOT NULL REFERENCES tenants (id),
  label        text NOT NULL DEFAULT '',
  created_at   timestamptz NOT NULL DEFAULT now(),
  revoked_at   timestamptz
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id);

-- No keys here: demo keys are published, so they are seeded for local runs
-- only (src/db/seed.ts). An earlier version of this file inserted them;
-- 0010_drop_demo_keys.sql removes them from databases it ran on.

CREATE TABLE workflow_outbox (
  workflow_id     text PRIMARY KEY,
  tenant_id       text NOT NULL,
  order_id        text NOT NULL,
  workflow_type   text NOT NULL,
  -- The queue the API was configured with at commit time. A relay starts
  -- only rows of its own queue, so deployments (or test runs) with different
  -- queues can share one database without starting each other's workflows.
  task_queue      text NOT NULL,
  input           jsonb NOT NULL,
  attempts        integer NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL DEFAULT now(),
  last_error      text,
  created_at      timestamptz NOT NULL DEFAULT now(),
  started_at      timestamptz,
  FOREIGN KEY (tenant_id, order_id) REFERENCES orders (tenant_id, id)
);
-- The relay's poll: unstarted rows that are due. Partial, so started rows cost nothing.
CREATE INDEX workflow_outbox_pending ON workflow_outbox (task_queue, next_attempt_at) WHERE started_at IS NULL;

CREATE TABLE webhook_events (
  provider    text NOT NULL,
  event_id    text NOT NULL,
  consumer    text NOT NULL,
  event_type  text NOT NULL,
  tenant_id   text,
  order_id    text,
  outcome     text NOT NULL,
  received_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (provider, event_id, consumer)
);
