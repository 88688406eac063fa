/**
 * Every statement the ledger runs, one exported function each, client first
 * so it can join a caller's transaction. Hot-path statements are named
 * (prepared once per connection, then only bound and executed).
 *
 * Locking model: the primary key (tenant_id, operation_type, key) is the only
 * lock. Claims are INSERT ... ON CONFLICT; every later step is a conditional
 * UPDATE/DELETE fenced by `owner_token`. Leases are compared with the
 * database clock (`now()`), never an app clock, so skewed workers agree on
 * who may take over.
 */
import type pg from 'pg';
import { pipelined, type Queryable } from './db.ts';
import type { FinalState, Json, ListFilter, OperationRecord, OperationState, Scope } from './types.ts';

const COLUMNS = `tenant_id, operation_type, key, fingerprint, schema_version, state, owner_token,
  lease_expires_at, attempts, downstream_key, provider_ref, result, error, created_at, updated_at, completed_at`;

export interface OperationRow {
  tenant_id: string;
  operation_type: string;
  key: string;
  fingerprint: string;
  schema_version: number;
  state: OperationState;
  owner_token: string | null;
  lease_expires_at: Date | null;
  attempts: number;
  downstream_key: string | null;
  provider_ref: string | null;
  result: Json | null;
  error: Json | null;
  created_at: Date;
  updated_at: Date;
  completed_at: Date | null;
}

export function toRecord(row: OperationRow): OperationRecord {
  return {
    tenantId: row.tenant_id,
    operationType: row.operation_type,
    key: row.key,
    fingerprint: row.fingerprint,
    schemaVersion: row.schema_version,
    state: row.state,
    ownerToken: row.owner_token,
    leaseExpiresAt: row.lease_expires_at,
    attempts: row.attempts,
    downstreamKey: row.downstream_key,
    providerRef: row.provider_ref,
    result: row.result,
    error: row.error,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    completedAt: row.completed_at,
  };
}

/** What a replay needs: the hot path reads only these columns. */
export interface ProbeRow {
  fingerprint: string;
  state: OperationState;
  result: Json | null;
  provider_ref: string | null;
  /** Milliseconds until the lease expires (database clock); null when unowned. */
  lease_ms_left: number | null;
}

function first<R>(result: pg.QueryResult<R & pg.QueryResultRow>): R | null {
  return result.rows[0] ?? null;
}

const pk = (scope: Scope) => [scope.tenantId, scope.operationType, scope.key];

/**
 * The replay probe: one primary-key read, no transaction. A completed
 * operation is answered by this statement alone.
 */
export async function selectProbe(db: Queryable, scope: Scope): Promise<ProbeRow | null> {
  return first<ProbeRow>(
    await db.query<ProbeRow>({
      name: 'ledger_select_probe',
      text: `select fingerprint, state, result, provider_ref,
               (extract(epoch from lease_expires_at - now()) * 1000)::float8 as lease_ms_left
             from operations where tenant_id = $1 and operation_type = $2 and key = $3`,
      values: pk(scope),
    }),
  );
}

export async function selectOperation(db: Queryable, scope: Scope): Promise<OperationRow | null> {
  return first<OperationRow>(
    await db.query<OperationRow>({
      name: 'ledger_select_operation',
      text: `select ${COLUMNS} from operations where tenant_id = $1 and operation_type = $2 and key = $3`,
      values: pk(scope),
    }),
  );
}

/**
 * FOR UPDATE: `settle` reads, decides, then writes. Without the lock a concurrent complete could
 * land in between and the caller's audit row would record a stale `before`.
 */
export async function selectOperationForUpdate(db: Queryable, scope: Scope): Promise<OperationRow | null> {
  return first<OperationRow>(
    await db.query<OperationRow>(
      `select ${COLUMNS} from operations where tenant_id = $1 and operation_type = $2 and key = $3 for update`,
      pk(scope),
    ),
  );
}

function settledValue<T>(outcome: PromiseSettledResult<T>): T {
  if (outcome.status === 'rejected') throw outcome.reason;
  return outcome.value;
}

/**
 * Local-mode claim: `BEGIN` and the INSERT in one write. The row stays uncommitted until the
 * business write commits with it, so:
 * - a duplicate's identical INSERT blocks on our row (bounded by lock_timeout), then replays if we
 *   commit or runs if we roll back; ON CONFLICT on the primary key, not an exists-check, decides;
 * - a crash before commit leaves no record.
 * The statement sets its own wait bound: `bound` (data-dependent on `prev`, so ordered) sets
 * lock_timeout before the INSERT can wait, and RETURNING restores the session's value so the
 * caller's body keeps its own lock settings. Returns whether this call claimed.
 */
export async function beginLocalClaim(
  client: Queryable,
  scope: Scope,
  args: {
    fingerprint: string;
    schemaVersion: number;
    ownerToken: string;
    leaseMs: number;
    lockTimeoutMs: number;
  },
  /** Runs in the same write after the claim, claimed or not; the caller rolls back if not. */
  first: readonly pg.QueryConfig[] = [],
): Promise<{ claimed: boolean; first: PromiseSettledResult<pg.QueryResult>[] }> {
  const [begin, claim, ...firstResults] = await pipelined<pg.QueryResult[]>(
    client,
    () =>
      [
        client.query('BEGIN'),
        client.query({
          name: 'ledger_insert_local_claim',
          text: `with prev as materialized (select current_setting('lock_timeout') as v),
                  bound as materialized (select set_config('lock_timeout', $8::int::text, true) as v from prev)
             insert into operations (tenant_id, operation_type, key, fingerprint, schema_version, state,
               owner_token, lease_expires_at)
             select $1::text, $2::text, $3::text, $4::text, $5::int, 'in_progress', $6::text,
                    now() + $7::float8 * interval '1 millisecond'
               from bound
             on conflict (tenant_id, operation_type, key) do nothing
             returning set_config('lock_timeout', (select v from prev), true)`,
          values: [
            ...pk(scope),
            args.fingerprint,
            args.schemaVersion,
            args.ownerToken,
            args.leaseMs,
            args.lockTimeoutMs,
          ],
        }),
        ...first.map((statement) => client.query(statement)),
      ] as never,
  );
  settledValue(begin!);
  return { claimed: settledValue(claim!).rowCount === 1, first: firstResults };
}

/**
 * Local mode as one autocommitted statement: the body's CTEs between the ledger's two, so the
 * business write and the record commit together or not at all:
 * - a committed record makes the INSERT fail on operations_pkey, aborting the body's writes too;
 * - a duplicate's uncommitted record makes it wait (bounded by `ledger_wait`'s lock_timeout);
 * - no `ledger_result` row: nothing inserted.
 * The body's parameters are `$1..$n`; the ledger's follow them.
 */
export function localStatementText(ctes: string, n: number): string {
  const p = (i: number) => `$${n + i}`;
  return `with ledger_wait as materialized (select set_config('lock_timeout', ${p(1)}::int::text, true) as v),
             ${ctes},
             ledger_record as (
               insert into operations (tenant_id, operation_type, key, fingerprint, schema_version, state,
                 result, completed_at)
               select ${p(2)}::text, ${p(3)}::text, ${p(4)}::text, ${p(5)}::text, ${p(6)}::int, 'succeeded',
                      r.result, now()
                 from ledger_result r, ledger_wait
               returning result)
             select result from ledger_record`;
}

/** Runs a checked local statement (a LocalStatement: its text is localStatementText's). */
export async function insertLocalStatement(
  db: Queryable,
  scope: Scope,
  args: { fingerprint: string; schemaVersion: number; lockTimeoutMs: number },
  statement: { readonly name: string; readonly text: string; readonly values: readonly unknown[] },
): Promise<{ result: Json } | null> {
  return first<{ result: Json }>(
    await db.query<{ result: Json }>({
      name: `ledger_stmt_${statement.name}`,
      text: statement.text,
      values: [...statement.values, args.lockTimeoutMs, ...pk(scope), args.fingerprint, args.schemaVersion],
    }),
  );
}

/** The message finishLocalClaimAndCommit fails with if the claim is not ours inside our own transaction. */
export const LOCAL_CLAIM_VANISHED = 'ledger invariant: local claim vanished inside its own transaction';

/**
 * Fenced local-mode completion and `COMMIT` in one write, after the body's `last` statements. If
 * the completion matches no row, the statement itself fails (the message cast to int raises
 * 22P02), so the pipelined COMMIT rolls back instead of committing a half-state; a failed `last`
 * statement aborts the transaction first, and is what this throws.
 */
export async function finishLocalClaimAndCommit(
  client: Queryable,
  scope: Scope,
  ownerToken: string,
  state: FinalState,
  resultJson: string,
  last: readonly pg.QueryConfig[] = [],
): Promise<void> {
  const results = await pipelined<pg.QueryResult[]>(
    client,
    () =>
      [
        ...last.map((statement) => client.query(statement)),
        finishLocalClaim(client, scope, ownerToken, state, resultJson),
        client.query('COMMIT'),
      ] as never,
  );
  const failedLast = results.slice(0, last.length).find((r) => r.status === 'rejected');
  if (failedLast) throw failedLast.reason;
  const [finish, commit] = results.slice(last.length) as [
    PromiseSettledResult<pg.QueryResult>,
    PromiseSettledResult<pg.QueryResult>,
  ];
  if (finish.status === 'rejected') {
    const err: unknown = finish.reason;
    if (err instanceof Error && err.message.includes(LOCAL_CLAIM_VANISHED))
      throw new Error(LOCAL_CLAIM_VANISHED);
    throw err;
  }
  if ((finish.value.rows[0] as { finished?: number } | undefined)?.finished !== 1) {
    // Unreachable: the statement fails rather than answer anything else.
    throw new Error(LOCAL_CLAIM_VANISHED);
  }
  const done = settledValue(commit);
  // An aborted transaction answers COMMIT with ROLLBACK: then nothing was stored.
  if (done.command !== 'COMMIT') throw new Error(`ledger: COMMIT answered ${done.command}`);
}

function finishLocalClaim(
  client: Queryable,
  scope: Scope,
  ownerToken: string,
  state: FinalState,
  resultJson: string,
): Promise<pg.QueryResult> {
  return client.query({
    name: 'ledger_finish_local_claim',
    text: `with done as (
             update operations
                set state = $5, result = $6::json, owner_token = null, lease_expires_at = null,
                    completed_at = now(), updated_at = now()
              where tenant_id = $1 and operation_type = $2 and key = $3 and owner_token = $4
             returning 1)
           select (case when count(*) = 1 then '1' else '${LOCAL_CLAIM_VANISHED}' end)::int as finished
             from done`,
    values: [...pk(scope), ownerToken, state, resultJson],
  });
}

/**
 * External-mode claim, autocommitted so every attempt sees it at once. One statement under the
 * primary key's lock:
 * - no row: a fresh claim (`inserted`: `xmax = 0` only for a new tuple);
 * - same fingerprint, unfinished, lease expired or unowned: take over with a new token, so the old
 *   owner's late completion is refused;
 * - anything else: no row; the caller reads the record to say which.
 * ON CONFLICT DO UPDATE ... WHERE locks the row first, so two takeovers can't both win.
 */
export async function upsertExternalClaim(
  db: Queryable,
  scope: Scope,
  args: {
    fingerprint: string;
    schemaVersion: number;
    ownerToken: string;
    leaseMs: number;
    downstreamKey: string;
  },
): Promise<(OperationRow & { inserted: boolean }) | null> {
  return first<OperationRow & { inserted: boolean }>(
    await db.query<OperationRow & { inserted: boolean }>({
      name: 'ledger_upsert_external_claim',
      text: `insert into operations as o (tenant_id, operation_type, key, fingerprint, schema_version, state,
               owner_token, lease_expires_at, downstream_key)
             values ($1, $2, $3, $4, $5, 'in_progress', $6, now() + $7::float8 * interval '1 millisecond', $8)
             on conflict (tenant_id, operation_type, key) do update
               set owner_token = excluded.owner_token,
                   lease_expires_at = excluded.lease_expires_at,
                   attempts = o.attempts + 1,
                   updated_at = now()
             where o.fingerprint = excluded.fingerprint
               and o.state in ('in_progress', 'unknown')
               and (o.lease_expires_at is null or o.lease_expires_at <= now())
             returning ${COLUMNS}, (xmax = 0) as inserted`,
      values: [
        ...pk(scope),
        args.fingerprint,
        args.schemaVersion,
        args.ownerToken,
        args.leaseMs,
        args.downstreamKey,
      ],
    }),
  );
}

/** Takeover without input (reconcileUnresolved): the claim's takeover eligibility, minus the fingerprint. */
export async function takeOverUnresolved(
  db: Queryable,
  scope: Scope,
  ownerToken: string,
  leaseMs: number,
): Promise<OperationRow | null> {
  return first<OperationRow>(
    await db.query<OperationRow>(
      `update operations
          set owner_token = $4, lease_expires_at = now() + $5::float8 * interval '1 millisecond',
              attempts = attempts + 1, updated_at = now()
        where tenant_id = $1 and operation_type = $2 and key = $3
          and state in ('in_progress', 'unknown')
          and (lease_expires_at is null or lease_expires_at <= now())
        returning ${COLUMNS}`,
      [...pk(scope), ownerToken, leaseMs],
    ),
  );
}

/**
 * Fenced completion: only the current owner token matches. No lease check: an owner whose lease ran
 * out but who was not taken over still holds the only token, and its outcome is real.
 */
export async function completeOwned(
  db: Queryable,
  scope: Scope,
  ownerToken: string,
  outcome: { state: FinalState; resultJson: string; providerRef: string | null },
): Promise<OperationRow | null> {
  return first<OperationRow>(
    await db.query<OperationRow>({
      name: 'ledger_complete_owned',
      text: `update operations
                set state = $5, result = $6::json, provider_ref = coalesce($7, provider_ref),
                    owner_token = null, lease_expires_at = null, completed_at = now(), updated_at = now()
              where tenant_id = $1 and operation_type = $2 and key = $3 and owner_token = $4
                and state in ('in_progress', 'unknown')
              returning ${COLUMNS}`,
      values: [...pk(scope), ownerToken, outcome.state, outcome.resultJson, outcome.providerRef],
    }),
  );
}

/**
 * Fenced lease renewal (database clock). Owner token + unfinished state under the row lock: it can
 * never resurrect a claim taken over, completed, released or marked unknown (each replaces or
 * clears the token), and a race with a takeover is ordered by the lock. `unknown` counts because a
 * takeover of an unknown record keeps that state while it reconciles. No lease check, as in
 * completeOwned. `updated_at` stays: a renewal is not a change of state.
 */
export async function extendOwned(
  db: Queryable,
  scope: Scope,
  ownerToken: string,
  leaseMs: number,
): Promise<Date | null> {
  const row = first<{ lease_expires_at: Date }>(
    await db.query<{ lease_expires_at: Date }>({
      name: 'ledger_extend_owned',
      text: `update operations
                set lease_expires_at = now() + $5::float8 * interval '1 millisecond'
              where tenant_id = $1 and operation_type = $2 and key = $3 and owner_token = $4
                and state in ('in_progress', 'unknown')
              returning lease_expires_at`,
      values: [...pk(scope), ownerToken, leaseMs],
    }),
  );
  return row?.lease_expires_at ?? null;
}

/** Fenced: the owner records that the outcome was lost and gives up ownership (the record needs reconcile). */
export async function markOwnedUnknown(
  db: Queryable,
  scope: Scope,
  ownerToken: string,
  errorJson: string,
): Promise<OperationRow | null> {
  return first<OperationRow>(
    await db.query<OperationRow>(
      `update operations
          set state = 'unknown', error = $5::json, owner_token = null, lease_expires_at = null, updated_at = now()
        where tenant_id = $1 and operation_type = $2 and key = $3 and owner_token = $4
          and state in ('in_progress', 'unknown')
        returning ${COLUMNS}`,
      [...pk(scope), ownerToken, errorJson],
    ),
  );
}

/**
 * Fenced delete of a claim whose effect did not happen: a stale owner must not delete the new owner's
 * claim.
 */
export async function deleteOwnedClaim(db: Queryable, scope: Scope, ownerToken: string): Promise<boolean> {
  // attempts = 1: after a takeover an earlier owner may still send under the key, and deleting
  // would let a later claim skip reconciling and charge twice (docs/MODEL.md F1).
  const { rowCount } = await db.query(
    `delete from operations
      where tenant_id = $1 and operation_type = $2 and key = $3 and owner_token = $4
        and state in ('in_progress', 'unknown') and attempts = 1`,
    [...pk(scope), ownerToken],
  );
  return rowCount === 1;
}

/**
 * Settles an unowned unresolved record; the WHERE repeats the eligibility so it is safe outside `settle`'s
 * lock.
 */
export async function settleUnowned(
  db: Queryable,
  scope: Scope,
  outcome: { state: FinalState; resultJson: string; providerRef: string | null },
): Promise<OperationRow | null> {
  return first<OperationRow>(
    await db.query<OperationRow>(
      `update operations
          set state = $4, result = $5::json, provider_ref = coalesce($6, provider_ref),
              owner_token = null, lease_expires_at = null, completed_at = now(), updated_at = now()
        where tenant_id = $1 and operation_type = $2 and key = $3
          and state in ('in_progress', 'unknown')
          and (lease_expires_at is null or lease_expires_at <= now())
        returning ${COLUMNS}`,
      [...pk(scope), outcome.state, outcome.resultJson, outcome.providerRef],
    ),
  );
}

/**
 * A record rebuilt after a restore: inserted only where the key has none, so a rerun or a worker's
 * newer record wins. Timestamps come from the history, so the key window counts from the first attempt.
 */
export async function insertRestored(
  db: Queryable,
  scope: Scope,
  r: {
    fingerprint: string;
    schemaVersion: number;
    state: 'succeeded' | 'failed' | 'unknown';
    downstreamKey: string | null;
    providerRef: string | null;
    resultJson: string | null;
    errorJson: string | null;
    createdAt: Date;
    completedAt: Date | null;
  },
): Promise<OperationRow | null> {
  return first<OperationRow>(
    await db.query<OperationRow>(
      `insert into operations (tenant_id, operation_type, key, fingerprint, schema_version, state,
                               downstream_key, provider_ref, result, error, created_at, updated_at, completed_at)
       values ($1, $2, $3, $4, $5, $6, $7, $8, $9::json, $10::json, $11, now(), $12)
       on conflict (tenant_id, operation_type, key) do nothing
       returning ${COLUMNS}`,
      [
        ...pk(scope),
        r.fingerprint,
        r.schemaVersion,
        r.state,
        r.downstreamKey,
        r.providerRef,
        r.resultJson,
        r.errorJson,
        r.createdAt,
        r.completedAt,
      ],
    ),
  );
}

/**
 * One primary-key probe per key, so the cost does not grow with the tenant's history (a prefix
 * filter on `key` under a non-"C" collation would read every record of the tenant).
 */
function selectOperationsByKeysStatement(
  tenantId: string,
  refs: readonly { operationType: string; key: string }[],
): pg.QueryConfig {
  return {
    name: 'ledger_select_by_keys',
    text: `select ${COLUMNS}
             from unnest($2::text[], $3::text[]) as wanted(wanted_type, wanted_key)
             join operations on tenant_id = $1 and operation_type = wanted_type and key = wanted_key
            order by created_at, operation_type, key`,
    values: [tenantId, refs.map((r) => r.operationType), refs.map((r) => r.key)],
  };
}

export async function selectOperationsByKeys(
  db: Queryable,
  tenantId: string,
  refs: readonly { operationType: string; key: string }[],
): Promise<OperationRow[]> {
  if (refs.length === 0) return [];
  return (await db.query<OperationRow>(selectOperationsByKeysStatement(tenantId, refs))).rows;
}

/**
 * The operator's listing: only `state`/`created_at` (operations_unresolved_idx) or the tenant
 * narrow the read; `keyPrefix` is a filter, not an index range.
 */
export async function listOperations(
  db: Queryable,
  filter: ListFilter & { limit: number },
): Promise<OperationRow[]> {
  const { rows } = await db.query<OperationRow>(
    `select ${COLUMNS} from operations
      where ($1::text is null or state = $1)
        and ($2::text is null or operation_type = $2)
        and ($3::text is null or tenant_id = $3)
        and ($4::text is null or starts_with(key, $4))
        and ($5::float8 is null or created_at < now() - $5::float8 * interval '1 millisecond')
      order by created_at, tenant_id, operation_type, key
      limit $6`,
    [
      filter.state ?? null,
      filter.operationType ?? null,
      filter.tenantId ?? null,
      filter.keyPrefix ?? null,
      filter.olderThanMs ?? null,
      filter.limit,
    ],
  );
  return rows;
}

/** Age in seconds of the oldest record in `state` (by created_at); null when there is none. */
export async function selectOldestAgeSeconds(
  db: Queryable,
  state: 'in_progress' | 'unknown',
): Promise<number | null> {
  const { rows } = await db.query<{ age: number | null }>(
    `select extract(epoch from now() - min(created_at))::float8 as age from operations where state = $1`,
    [state],
  );
  return rows[0]?.age ?? null;
}

/**
 * One reaper batch. SKIP LOCKED: two reapers split the work, and a row a settle or claim holds waits
 * for the next run. The outer WHERE repeats the state filter, so only final records are deleted.
 */
export async function deleteReapBatch(
  db: Queryable,
  olderThanMs: number,
  batchSize: number,
): Promise<{ succeeded: number; failed: number }> {
  const { rows } = await db.query<{ succeeded: number; failed: number }>(
    `with victims as (
       select tenant_id, operation_type, key from operations
        where state in ('succeeded', 'failed')
          and completed_at < now() - $1::float8 * interval '1 millisecond'
        order by completed_at
        limit $2
        for update skip locked
     ), deleted as (
       delete from operations o using victims v
        where o.tenant_id = v.tenant_id and o.operation_type = v.operation_type and o.key = v.key
          and o.state in ('succeeded', 'failed')
       returning o.state
     )
     select count(*) filter (where state = 'succeeded')::int as succeeded,
            count(*) filter (where state = 'failed')::int as failed
       from deleted`,
    [olderThanMs, batchSize],
  );
  return rows[0] ?? { succeeded: 0, failed: 0 };
}
