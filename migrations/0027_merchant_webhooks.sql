-- Why: events out to merchants (issue 46). A tenant registers endpoints; each
-- terminal order or refund transition records one event in the same statement
-- as the transition, one delivery per subscribed endpoint, and the start
-- intent of that delivery's workflow (workflow_outbox), so nothing between the
-- status change and the first delivery attempt can be lost.
--
-- * webhook_endpoints: a tenant's receivers. `secrets` holds the signing
--   secrets in use, newest first; a rotation keeps the previous one until
--   `previous_expires_at`, so receivers can switch without a gap.
-- * merchant_events: one row per reported transition. Its ID is derived from
--   the status step's key, so a retried, reset or re-driven workflow can only
--   produce the same ID again. `object` is the row as the transition left it
--   (rendered as GET renders it at delivery time); `version` is its status_seq.
-- * webhook_deliveries: one per (endpoint, event), the unit of work; its
--   workflow is delivery/<endpoint>/<event>[/r<n>] (a redelivery gets the next n).
-- * webhook_delivery_attempts: every HTTP attempt, for operators and receivers'
--   support questions.
--
-- Online-safe (migrations/README.md): new tables, and the audit action
-- `webhook_redeliver` added NOT VALID as 0021 did (no scan).
SET LOCAL lock_timeout = '5s';
CREATE TABLE webhook_endpoints (
  tenant_id           text        NOT NULL REFERENCES tenants (id),
  id                  text        NOT NULL PRIMARY KEY,
  url                 text        NOT NULL,
  events              text[]      NOT NULL CHECK (cardinality(events) >= 1),
  -- Newest first; at most two (the current one and, during a rotation, the previous one).
  secrets             text[]      NOT NULL CHECK (cardinality(secrets) BETWEEN 1 AND 2),
  previous_expires_at timestamptz,
  created_at          timestamptz NOT NULL DEFAULT now(),
  deleted_at          timestamptz
);
CREATE INDEX webhook_endpoints_tenant ON webhook_endpoints (tenant_id, created_at, id) WHERE deleted_at IS NULL;

CREATE TABLE merchant_events (
  id          text        NOT NULL PRIMARY KEY CHECK (id ~ '^evt_[0-9a-f]{32}$'),
  tenant_id   text        NOT NULL,
  type        text        NOT NULL CHECK (type IN (
                'order.completed', 'order.rejected', 'order.needs_attention',
                'refund.succeeded', 'refund.failed', 'refund.needs_attention')),
  object_id   text        NOT NULL,
  order_id    text        NOT NULL,
  version     integer     NOT NULL,
  object      jsonb       NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX merchant_events_tenant ON merchant_events (tenant_id, created_at, id);

CREATE TABLE webhook_deliveries (
  endpoint_id     text        NOT NULL REFERENCES webhook_endpoints (id),
  event_id        text        NOT NULL REFERENCES merchant_events (id),
  tenant_id       text        NOT NULL,
  workflow_id     text        NOT NULL UNIQUE,
  status          text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'succeeded', 'failed')),
  attempts        integer     NOT NULL DEFAULT 0,
  last_status     integer,
  last_error      text,
  redeliveries    integer     NOT NULL DEFAULT 0,
  -- The retry window of a redelivery runs from here (the first delivery's from created_at).
  redelivered_at  timestamptz,
  created_at      timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now(),
  delivered_at    timestamptz,
  PRIMARY KEY (endpoint_id, event_id)
);
-- The backlog, the oldest undelivered event and failures: by status.
CREATE INDEX webhook_deliveries_status ON webhook_deliveries (status, created_at);
CREATE INDEX webhook_deliveries_tenant ON webhook_deliveries (tenant_id, created_at);

CREATE TABLE webhook_delivery_attempts (
  id               bigserial   PRIMARY KEY,
  endpoint_id      text        NOT NULL,
  event_id         text        NOT NULL,
  attempt          integer     NOT NULL,
  started_at       timestamptz NOT NULL,
  latency_ms       integer     NOT NULL,
  status_code      integer,
  error            text,
  response_excerpt text,
  FOREIGN KEY (endpoint_id, event_id) REFERENCES webhook_deliveries (endpoint_id, event_id)
);
CREATE INDEX webhook_delivery_attempts_delivery ON webhook_delivery_attempts (endpoint_id, event_id, id);

ALTER TABLE audit_log
  DROP CONSTRAINT audit_log_action_check,
  ADD CONSTRAINT audit_log_action_check
    CHECK (action IN ('reconcile', 'resolve', 'redrive', 'redrive_requested', 'redrive_refused', 'redrive_unknown',
                      'restore', 'webhook_redeliver'))
    NOT VALID;
