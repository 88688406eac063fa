-- Why: the sandbox payment and email providers behave like a real provider's
-- test mode, so their state must survive restarts and stay correct under many
-- concurrent requests. It lives in its own schema, `sandbox`, which nothing
-- outside dev/sandbox reads or writes: the product talks to it over HTTP only.
-- This chain is the sandbox's own (dev/sandbox/migrate.ts, recorded in
-- `sandbox.migrations`), applied by the sandbox when it starts; the product's
-- chain (migrations/) holds none of it.
--
-- Every statement is IF NOT EXISTS: a database migrated before the split has
-- these tables already, created by the product chain's 0003_sandbox.sql with
-- exactly this DDL, and this file adopts them as they are.
--
-- Every table carries an `account` (like a provider account): one sandbox
-- process serves one account, and parallel test files use their own accounts
-- so faults, webhook settings and resets never leak between them.
CREATE SCHEMA IF NOT EXISTS sandbox;

-- One row per (account, scope, Idempotency-Key). The primary key is the lock:
-- a claim is one INSERT ... ON CONFLICT, so two concurrent requests with the
-- same key can never both run the effect. `token` fences the completion: a
-- request whose claim was taken over (lease expired) cannot complete it.
CREATE TABLE IF NOT EXISTS sandbox.idempotency_keys (
  account         text        NOT NULL,
  scope           text        NOT NULL CHECK (scope IN ('charges', 'messages')),
  key             text        NOT NULL,
  fingerprint     text        NOT NULL,
  state           text        NOT NULL CHECK (state IN ('processing', 'completed')),
  token           uuid        NOT NULL,
  locked_until    timestamptz NOT NULL,
  response_status integer,
  response_body   jsonb,
  created_at      timestamptz NOT NULL,
  completed_at    timestamptz,
  PRIMARY KEY (account, scope, key),
  CHECK ((state = 'completed') = (response_status IS NOT NULL))
);

-- Every charge that really happened (succeeded or declined).
CREATE TABLE IF NOT EXISTS sandbox.charges (
  id              text        PRIMARY KEY,
  account         text        NOT NULL,
  idempotency_key text        NOT NULL,
  amount          integer     NOT NULL CHECK (amount > 0),
  currency        text        NOT NULL,
  status          text        NOT NULL CHECK (status IN ('succeeded', 'failed')),
  failure_code    text,
  payment_method  text        NOT NULL,
  description     text,
  receipt_email   text,
  metadata        jsonb       NOT NULL DEFAULT '{}',
  created_at      timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS charges_key_idx ON sandbox.charges (account, idempotency_key, created_at DESC);
CREATE INDEX IF NOT EXISTS charges_order_idx ON sandbox.charges (account, (metadata ->> 'order_id'));

-- Every message that was really sent.
CREATE TABLE IF NOT EXISTS sandbox.messages (
  id              text        PRIMARY KEY,
  account         text        NOT NULL,
  idempotency_key text        NOT NULL,
  to_address      text        NOT NULL,
  subject         text        NOT NULL,
  body_text       text        NOT NULL,
  metadata        jsonb       NOT NULL DEFAULT '{}',
  created_at      timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_key_idx ON sandbox.messages (account, idempotency_key, created_at DESC);
CREATE INDEX IF NOT EXISTS messages_order_idx ON sandbox.messages (account, (metadata ->> 'order_id'));

-- Injected faults, consumed one request at a time by a conditional UPDATE
-- (remaining > 0), so two concurrent requests can't both take the last one.
CREATE TABLE IF NOT EXISTS sandbox.faults (
  id         bigserial   PRIMARY KEY,
  account    text        NOT NULL,
  endpoint   text        NOT NULL
    CHECK (endpoint IN ('charges.create', 'charges.lookup', 'messages.create', 'messages.lookup')),
  kind       text        NOT NULL CHECK (kind IN ('fail_before', 'fail_after', 'drop_after', 'delay')),
  remaining  integer     NOT NULL CHECK (remaining >= 0),
  delay_ms   integer     CHECK (delay_ms IS NULL OR delay_ms >= 0),
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS faults_active_idx ON sandbox.faults (account, endpoint, id) WHERE remaining > 0;

-- Runtime webhook delivery settings per account. `url` NULL means "the URL the
-- process was started with".
CREATE TABLE IF NOT EXISTS sandbox.webhook_config (
  account    text        PRIMARY KEY,
  url        text,
  enabled    boolean     NOT NULL DEFAULT true,
  duplicate  boolean     NOT NULL DEFAULT false,
  reorder    boolean     NOT NULL DEFAULT false,
  updated_at timestamptz NOT NULL DEFAULT now()
);

-- The webhook outbox. Rows are written in the same transaction as the charge,
-- so an event exists if and only if the charge does; the dispatcher delivers
-- at least once. Exhausted events stay here as 'failed' (never deleted).
CREATE TABLE IF NOT EXISTS sandbox.webhook_events (
  id              text        PRIMARY KEY,
  seq             bigserial   NOT NULL,
  account         text        NOT NULL,
  type            text        NOT NULL,
  object          jsonb       NOT NULL,
  created_at      timestamptz NOT NULL,
  state           text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
  attempts        integer     NOT NULL DEFAULT 0,
  deliveries      integer     NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL,
  locked_until    timestamptz,
  last_status     integer,
  last_error      text,
  delivered_at    timestamptz
);
CREATE INDEX IF NOT EXISTS webhook_events_due_idx ON sandbox.webhook_events (account, next_attempt_at) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS webhook_events_account_idx ON sandbox.webhook_events (account, seq);
