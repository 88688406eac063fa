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
import { inOneWrite, type Queryable } from './db.ts';
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
 * FOR UPDATE: `settle` reads, decides, then writes. Without the row lock a
 * concurrent complete could land between the read and the write, and settle
 * would report a stale `before` (the conditional UPDATE would still refuse
 * to overwrite a final record, but the caller's audit row would lie).
 */
export async function selectOperationForUpdate(db: Queryable, scope: Scope): Promise<OperationRow | null> {
  return first<OperationRow>(
    await db.query<OperationRow>(
      `select ${COLUMNS} from operations where tenant_id = $1 and operation_type = $2 and key = $3 for update`,
      pk(scope),
    ),
  );
}

/**
 * Sends several statements in one network write and waits for every answer.
 * node-postgres' pipeline mode (a client option since pg 8.23) writes each
 * query as soon as it is issued, each with its own Sync, and matches the
 * answers in order; here it is switched on for one checked-out client only
 * while these statements are in flight, so every other statement on the
 * connection (the caller's body among them) runs exactly as before. Each
 * statement keeps its own Sync, so the server runs them one after another,
 * as if they had been sent separately: an error in one does not skip the
 * next (a statement after an error inside a transaction fails with 25P02, and
 * a COMMIT there rolls back). What the pipeline saves is the wait between
 * them: one round trip instead of one per statement.
 */
async function pipelined<T extends readonly unknown[]>(
  client: Queryable,
  send: () => { readonly [K in keyof T]: Promise<T[K]> },
): Promise<{ -readonly [K in keyof T]: PromiseSettledResult<T[K]> }> {
  // `pipeline` is a ClientConfig option; pg reads the client's field at every
  // send, so it can be set per client (its typings declare it read-only).
  const mode = client as unknown as { pipeline?: boolean };
  if (typeof mode.pipeline !== 'boolean' || mode.pipeline) {
    // Not a node-postgres client (or one that pipelines anyway): plain sends, same results.
    return Promise.allSettled(send()) as never;
  }
  mode.pipeline = true;
  try {
    return (await Promise.allSettled(inOneWrite(client, send))) as never;
  } finally {
    // Every statement has answered (or failed): nothing is on the wire that the
    // non-pipelined mode would not expect, except the ReadyForQuery of a
    // statement that failed, which that mode handles like any other.
    mode.pipeline = false;
  }
}

function settledValue<T>(outcome: PromiseSettledResult<T>): T {
  if (outcome.status === 'rejected') throw outcome.reason;
  return outcome.value;
}

/**
 * Local-mode claim, inside a transaction opened here: `BEGIN` and the claim
 * INSERT go out in one network write (see `pipelined`), so a fresh claim
 * costs one round trip, not two. The row stays uncommitted until the
 * business write commits with it, so:
 * - a concurrent duplicate's identical INSERT blocks on our row (bounded by
 *   lock_timeout) and, when we commit, takes the conflict path and replays;
 *   if we roll back, it inserts and runs instead. Without ON CONFLICT on the
 *   primary key, two duplicates could both pass a "does it exist?" check.
 * - a crash before commit leaves no record at all.
 * The wait bound is set by this same statement, to save a round trip per
 * claim: `prev` reads the session's lock_timeout, `bound` (which reads
 * `prev` first, a data dependency, not evaluation order) sets
 * `lockTimeoutMs` for the rest of the transaction, and only then does the
 * INSERT run for the row `bound` produced and, on a conflict, wait. A
 * lock_timeout change takes effect at the next lock wait, mid-statement.
 * RETURNING restores the session's value once the claim is ours, so the
 * caller's body runs with its own lock settings (evaluated after any wait).
 * `BEGIN` cannot fail on a healthy connection that is idle outside a
 * transaction (which is how the pool hands it over); a dead connection fails
 * both. Either failure is thrown, BEGIN's first; the caller rolls back.
 * Returns true when this call claimed the operation.
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
  /**
   * The body's first statements, sent in the same write after the claim (see
   * Ledger.runLocal's `first`): they run inside the transaction whether or not
   * the claim inserted; the caller rolls back when it did not.
   */
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
 * Local mode as one autocommitted statement (Ledger.runLocalStatement): the
 * body's CTEs between the ledger's two (the contract is in
 * local-statement.ts, which calls this once per statement name). The
 * statement is its own transaction, so the business write and the record
 * commit together or not at all:
 * - a committed record under the key makes the INSERT fail with a unique
 *   violation on operations_pkey, which aborts the whole statement, the
 *   body's writes with it; the caller then reads the record (replay);
 * - a duplicate's uncommitted record makes the INSERT wait for it (bounded,
 *   like the claim in beginLocalClaim, by `ledger_wait`, which sets
 *   lock_timeout for this statement's implicit transaction only), then fail
 *   the same way if it committed, or insert if it rolled back;
 * - no `ledger_result` row: nothing inserted, no row returned.
 * `attempts` keeps its default (1), as a local claim's record does. The
 * body's parameters are `$1..$n`; the ledger's follow them.
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
 * Local-mode completion and `COMMIT`, in one network write (see `pipelined`);
 * the completion is fenced like every completion. It must never let the
 * COMMIT behind it commit a half-state: if it matches no row (unreachable
 * while we hold the uncommitted claim) the statement itself fails (casting
 * the message to int raises 22P02), the transaction is aborted, and the
 * COMMIT that follows in the pipeline rolls back instead. Throws the
 * completion's error (LOCAL_CLAIM_VANISHED for the invariant), else COMMIT's.
 */
export async function finishLocalClaimAndCommit(
  client: Queryable,
  scope: Scope,
  ownerToken: string,
  state: FinalState,
  resultJson: string,
): Promise<void> {
  const [finish, commit] = await pipelined<[pg.QueryResult, pg.QueryResult]>(client, () => [
    client.query({
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
    }),
    client.query('COMMIT'),
  ]);
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
  // An aborted transaction answers COMMIT with ROLLBACK; after a successful
  // completion that cannot happen, but if it ever does, nothing was stored.
  if (done.command !== 'COMMIT') throw new Error(`ledger: COMMIT answered ${done.command}`);
}

/**
 * External-mode claim, autocommitted so every other attempt sees it at once.
 * One statement decides between three cases under the primary key's lock:
 * - no row: insert a fresh claim (`inserted` true);
 * - same fingerprint AND (lease expired OR unknown and unowned/expired):
 *   take it over with a new owner token and lease (`inserted` false). The old
 *   owner's token no longer matches, so its late completion is refused;
 * - anything else (live claim, final record, other fingerprint): no row; the
 *   caller reads the record to say which. ON CONFLICT DO UPDATE ... WHERE
 *   locks the conflicting row first, so two takeovers can't both win.
 * `xmax = 0` is true only for a freshly inserted tuple (Postgres idiom).
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

/**
 * Takeover without input (reconcileUnresolved): same eligibility as the claim's
 * takeover branch, minus the fingerprint (there is no new input to compare).
 */
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
 * Fenced completion: only the current owner token matches. The lease is NOT
 * checked: an owner whose lease ran out but who was not taken over still
 * holds the only token, and its outcome is real. Once someone takes over, the
 * token changed and this matches nothing (the stale owner is refused).
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
 * Fenced lease renewal: the owner pushes its lease forward (database clock)
 * while its attempt is still running. Conditional on the owner token and an
 * unfinished state, in one statement under the row lock: a renewal can never
 * resurrect a claim that was taken over (the token changed), completed,
 * released or marked unknown (each of those clears or replaces the token),
 * and a renewal racing a takeover is ordered by the row lock: whichever
 * commits second sees the other's token. `unknown` is included because a
 * takeover of an unknown record keeps that state while its new owner
 * reconciles (the owner token is what makes it a live claim). No lease check: an owner whose lease ran out
 * but who was not taken over still holds the only token (as in
 * completeOwned), and renewing then is exactly what keeps a slow attempt
 * from being taken over. `updated_at` is left alone: a renewal is not a
 * change of state. Returns the new expiry, or null when refused.
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
 * Fenced: the owner proves the effect did not happen and releases the claim
 * by deleting it, so the next attempt starts fresh under the same downstream
 * key. Fencing matters: after a takeover the stale owner must not delete the
 * new owner's claim.
 */
export async function deleteOwnedClaim(db: Queryable, scope: Scope, ownerToken: string): Promise<boolean> {
  // attempts = 1: only a first claim may be deleted. After a takeover an
  // earlier owner may still send under the key (a paused attempt whose lease
  // ran out); deleting the record would let a later claim start fresh without
  // reconciling, and once the provider's key window passes, charge twice
  // (found by the SPIN model, docs/MODEL.md F1). Such a claim is marked
  // unknown instead.
  const { rowCount } = await db.query(
    `delete from operations
      where tenant_id = $1 and operation_type = $2 and key = $3 and owner_token = $4
        and state in ('in_progress', 'unknown') and attempts = 1`,
    [...pk(scope), ownerToken],
  );
  return rowCount === 1;
}

/**
 * Settles an unresolved record nobody owns (unknown, or a claim whose lease
 * expired). The WHERE repeats the eligibility so the statement is safe even
 * outside `settle`'s FOR UPDATE read.
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
 * A record rebuilt after a database restore (Ledger.restore): inserted only
 * where the key has no record, so a second run of the recovery, or a record a
 * worker wrote since, is never overwritten. Timestamps come from the system
 * that kept them (Temporal's history), so the key window is counted from the
 * first attempt, not from the restore.
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
 * The records of these keys of one tenant, oldest first: one primary-key
 * probe per (operation type, key) pair, so the cost does not grow with the
 * tenant's history (a prefix filter on `key` can use only the tenant part of
 * the primary key under a non-"C" collation, and reads every record of the
 * tenant). Missing keys are simply absent.
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
 * The operator's listing (admin routes, `npm run ops`): every filter is
 * optional, so only `state`/`created_at` (operations_unresolved_idx) or the
 * tenant can narrow the read; `keyPrefix` is a filter, not an index range.
 * Tenant-facing reads of known keys use selectOperationsByKeys instead.
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
 * One bounded reaper batch. FOR UPDATE SKIP LOCKED: two reapers split the
 * work instead of queueing behind each other, and a row a settle/claim is
 * holding is simply left for the next run. The outer WHERE repeats the state
 * filter, so only final records can ever be deleted.
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
