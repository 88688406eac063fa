-- Why: the operation ledger (src/ledger.ts) makes every step of an order happen
-- once. One row per operation scope (tenant, operation type, key); the
-- primary key IS the lock: a claim is one INSERT ... ON CONFLICT, a
-- completion one UPDATE ... WHERE owner_token = $token. Nothing checks then
-- inserts. See docs/LEDGER.md.
CREATE TABLE operations (
  tenant_id        text        NOT NULL,
  operation_type   text        NOT NULL,
  key              text        NOT NULL,
  -- Hex SHA-256 of canonical JSON (operation type, schema version, input).
  fingerprint      text        NOT NULL,
  schema_version   integer     NOT NULL,
  state            text        NOT NULL,
  -- Fencing token of the current claim; NULL when nobody owns the record.
  owner_token      text,
  -- Database clock only: app clocks never decide who may take over.
  lease_expires_at timestamptz,
  attempts         integer     NOT NULL DEFAULT 1,
  downstream_key   text,
  provider_ref     text,
  -- json, not jsonb: the stored text comes back byte for byte on replay
  -- (jsonb would reorder keys and drop duplicates).
  result           json,
  error            json,
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  completed_at     timestamptz,
  CONSTRAINT operations_pkey PRIMARY KEY (tenant_id, operation_type, key),
  CONSTRAINT operations_state_check CHECK (state IN ('in_progress', 'succeeded', 'failed', 'unknown')),
  -- A claim always has an owner and a lease, or it could never be taken over.
  CONSTRAINT operations_claim_check CHECK (
    state <> 'in_progress' OR (owner_token IS NOT NULL AND lease_expires_at IS NOT NULL)
  ),
  -- Final records have a completion time (the reaper's clock) and no owner.
  CONSTRAINT operations_final_check CHECK (
    (state IN ('succeeded', 'failed')) = (completed_at IS NOT NULL)
    AND (state NOT IN ('succeeded', 'failed') OR owner_token IS NULL)
  )
);

-- Backlog and age of unresolved operations (oldestAgeSeconds, list, attention views).
CREATE INDEX operations_unresolved_idx ON operations (state, created_at)
  WHERE state IN ('in_progress', 'unknown');

-- The reaper walks completed records oldest first; in_progress/unknown are not even in the index.
CREATE INDEX operations_reap_idx ON operations (completed_at)
  WHERE state IN ('succeeded', 'failed');
