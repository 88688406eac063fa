/**
 * The operation ledger: makes an operation happen once per scope, in local
 * mode (one transaction with the business write) or external mode (claim,
 * perform with a stable downstream key, complete; reconcile before any retry
 * of an uncertain outcome). Vocabulary: see the Terminology block in types.ts.
 */
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import {
  SQLSTATE,
  TRANSACTION_RETRIES,
  isSqlState,
  isTransientConflict,
  withClient,
  withTransaction,
  type Pool,
  type PoolClient,
  type Queryable,
} from './db.ts';
import { withRetry, type RetryPolicy } from './db.ts';
import { canonicalJson, downstreamKey, fingerprint, toStoredJson, validateScope } from './canonical.ts';
import { FinalFailure, LedgerError, isDefiniteFailure, isLedgerError } from './errors.ts';
import { LocalStatement } from './local-statement.ts';
import * as sql from './sql.ts';
import type {
  ClaimResult,
  ExternalHandlers,
  ExternalOutcome,
  ExternalRunOptions,
  ExternalRunResult,
  FinalState,
  Json,
  LedgerEvent,
  LedgerHooks,
  LedgerInput,
  LedgerOptions,
  ListFilter,
  LocalRunOptions,
  OperationRecord,
  ReapOptions,
  ReapResult,
  ReconcileContext,
  ReconcileOutcome,
  ReconcileUnresolvedResult,
  Scope,
} from './types.ts';

/**
 * Short, because runExternal renews it while the attempt runs: a crashed
 * worker's step is taken over within one lease instead of a whole attempt.
 */
const DEFAULT_LEASE_MS = 15_000;
/** A provider's idempotency-key window when the caller names none: 24 h, as Stripe's. */
const DEFAULT_KEY_WINDOW_MS = 24 * 60 * 60 * 1000;
const DEFAULT_LOCAL_WAIT_MS = 5_000;
/** `list` returns at most this many records, whatever limit is asked for. */
const MAX_LIST_LIMIT = 1000;

/** retry-after hint for a local duplicate that outwaited localWaitMs. */
const LOCAL_RETRY_AFTER_MS = 1_000;

/**
 * Node's setTimeout and Postgres' lock_timeout both stop at 2^31-1 ms; past it one fires at once, the other
 * fails mid-transaction.
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;

function positiveInt(value: number | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value <= 0)
    throw new LedgerError('invalid_input', `${name} must be a positive integer`);
  return value;
}

function timerMs(value: number | undefined, fallback: number, name: string): number {
  const ms = positiveInt(value, fallback, name);
  if (ms > MAX_TIMER_MS)
    throw new LedgerError('invalid_input', `${name} must be at most ${MAX_TIMER_MS} ms (2^31-1)`);
  return ms;
}

function isFinal(state: string): state is 'succeeded' | 'failed' {
  return state === 'succeeded' || state === 'failed';
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function retryAfter(leaseMsLeft: number | null, fallback: number): number {
  if (leaseMsLeft === null || !Number.isFinite(leaseMsLeft)) return fallback;
  return Math.max(100, Math.ceil(leaseMsLeft));
}

/**
 * Stop performing again this long before the key window ends: covers clock skew and the perform's own
 * duration.
 */
function keyWindowMarginMs(keyWindowMs: number): number {
  return Math.min(60 * 60 * 1000, keyWindowMs / 10);
}

/**
 * True while performing again under the record's downstream key is safe: the provider's window
 * starts at its first request under the key, never earlier than the record's creation.
 */
export function withinKeyWindow(
  record: Pick<OperationRecord, 'createdAt'>,
  keyWindowMs: number,
  nowMs = Date.now(),
): boolean {
  return record.createdAt.getTime() + keyWindowMs - keyWindowMarginMs(keyWindowMs) > nowMs;
}

function callHook(hook: (() => void) | undefined): void {
  try {
    hook?.();
  } catch {
    // A heartbeat hook must never change an operation's outcome.
  }
}

/** Internal signal: the row we conflicted with vanished before we could read it; start over. */
class RaceRetry extends Error {}

/** A local step runs again as a whole on a transient conflict or when the record it met vanished. */
const LOCAL_RETRY: RetryPolicy = {
  retries: TRANSACTION_RETRIES,
  retryable: (err) => err instanceof RaceRetry || isTransientConflict(err),
};

/** The external claim runs again when the record it conflicted with changed between two statements. */
const CLAIM_RACE_RETRY: RetryPolicy = { retries: 2, retryable: (err) => err instanceof RaceRetry };

/** What one local-mode attempt did (#local). */
type LocalAttempt =
  /** Stored the record with the business write, committed. */
  | { kind: 'stored'; state: FinalState; value: Json }
  /** Met a committed record; nothing of this attempt was kept. */
  | { kind: 'found' }
  /** runLocalStatement: the body had nothing to do; nothing was stored. */
  | { kind: 'nothing' };

/** Both local modes' `readFirst`, refused unless a boolean (a JavaScript caller may pass anything). */
function readFirstOption(opts: Pick<LocalRunOptions, 'readFirst'>): boolean {
  const { readFirst = false } = opts;
  if (typeof readFirst !== 'boolean')
    throw new LedgerError('invalid_input', 'readFirst must be true or false');
  return readFirst;
}

export class Ledger {
  readonly #pool: Pool;
  readonly #hooks: LedgerHooks;
  readonly #leaseMs: number;
  readonly #localWaitMs: number;

  constructor(pool: Pool, options: LedgerOptions = {}) {
    this.#pool = pool;
    this.#hooks = options.hooks ?? {};
    this.#leaseMs = timerMs(options.leaseMs, DEFAULT_LEASE_MS, 'leaseMs');
    this.#localWaitMs = timerMs(options.localWaitMs, DEFAULT_LOCAL_WAIT_MS, 'localWaitMs');
  }

  #emit(type: LedgerEvent['type'], scope: Scope, outcome?: string): void {
    if (!this.#hooks.onEvent) return;
    const event: LedgerEvent = { type, operationType: scope.operationType };
    if (outcome !== undefined) event.outcome = outcome;
    try {
      this.#hooks.onEvent(event); // called as a method: hooks may be objects that use `this`
    } catch {
      // Observability must never change an operation's outcome.
    }
  }

  #conflict(scope: Scope): LedgerError {
    this.#emit('conflict', scope);
    return new LedgerError('conflict', 'operation key was already used with a different input', { scope });
  }

  #inProgress(scope: Scope, retryAfterMs: number): LedgerError {
    this.#emit('in_progress', scope);
    return new LedgerError('in_progress', 'operation is in progress in another attempt', {
      scope,
      retryAfterMs,
    });
  }

  #ownershipLost(scope: Scope, outcome?: string): LedgerError {
    this.#emit('ownership_lost', scope, outcome);
    return new LedgerError(
      'ownership_lost',
      'claim was taken over or settled by someone else; this attempt may not complete it',
      {
        scope,
      },
    );
  }

  #prepare(scope: Scope, input: LedgerInput): string {
    validateScope(scope);
    if (typeof input !== 'object' || input === null)
      throw new LedgerError('invalid_input', 'input is required');
    return fingerprint(scope.operationType, input.schemaVersion, input.value);
  }

  // ---------------------------------------------------------------- local mode

  /**
   * Runs `fn` once per scope; its writes (through `tx`) and the completion
   * commit in one transaction. `fn` must not COMMIT or ROLLBACK itself.
   * - Replay: the stored result, `fn` not called. A stored FinalFailure is thrown again.
   * - Concurrent duplicate: waits up to `localWaitMs` for the first attempt,
   *   then replays (or runs, if the first rolled back); past the wait,
   *   LedgerError('in_progress').
   * - Different input under the scope: LedgerError('conflict').
   * - `fn` throws: rollback, nothing stored, the error is rethrown unchanged.
   * - `fn` throws FinalFailure: commit with the record `failed` (see FinalFailure).
   * - `withCommit(statement)`: a last write of `fn`'s, sent in the completion's write, ahead of it,
   *   once `fn` returns (no round trip of its own). Its error rolls it all back and is thrown.
   * The first caller gets the JSON round trip of its result, exactly what a replay returns.
   */
  async runLocal<T extends Json>(
    scope: Scope,
    input: LedgerInput,
    fn: (
      tx: PoolClient,
      first: pg.QueryResult[],
      withCommit: (statement: pg.QueryConfig) => void,
    ) => Promise<T>,
    opts: LocalRunOptions = {},
  ): Promise<{ result: T; replayed: boolean }> {
    const fp = this.#prepare(scope, input);
    const ran = await this.#local<T, PoolClient>(
      scope,
      fp,
      readFirstOption(opts),
      (body) => withClient(this.#pool, body),
      this.#transactionAttempt(scope, input.schemaVersion, fp, fn, opts.first),
    );
    if (!ran) throw new Error('ledger invariant: a transaction attempt always stores or finds a record');
    return ran;
  }

  /**
   * Local mode in one autocommitted statement, for a body that is only data-modifying SQL (see
   * local-statement.ts): the business write and the record are one round trip. Same replay,
   * duplicate and conflict guarantees as runLocal; a replay's INSERT fails on the committed record
   * and takes the body's writes with it. Returns null, storing nothing, when `ledger_result` has
   * no row. `readFirst`: for a caller likely to be a replay (a later attempt of its step).
   */
  async runLocalStatement<T extends Json>(
    scope: Scope,
    input: LedgerInput,
    body: LocalStatement,
    opts: Pick<LocalRunOptions, 'readFirst'> = {},
  ): Promise<{ result: T; replayed: boolean } | null> {
    const fp = this.#prepare(scope, input);
    if (!LocalStatement.isChecked(body))
      throw new LedgerError('invalid_input', 'a local statement must be built with new LocalStatement(...)');
    const readFirst = readFirstOption(opts);
    // No checkout: both statements autocommit, so each goes to the pool.
    return this.#local<T, Queryable>(
      scope,
      fp,
      readFirst,
      (step) => step(this.#pool),
      this.#statementAttempt(scope, input.schemaVersion, fp, body),
    );
  }

  /**
   * The one local-mode path: [read first] -> an attempt that stores the record with the business
   * write or finds a committed one -> [replay it]. A record that vanishes before the read (the
   * reaper) runs it all again; one that keeps vanishing ends as in_progress.
   */
  async #local<T extends Json, D extends Queryable>(
    scope: Scope,
    fp: string,
    /** Read the record by primary key before the attempt: a replay then costs one statement. */
    readFirst: boolean,
    /** Where one try runs: on one checked-out client (a transaction), or on the pool (single statements). */
    on: <R>(step: (db: D) => Promise<R>) => Promise<R>,
    attempt: (db: D) => Promise<LocalAttempt>,
  ): Promise<{ result: T; replayed: boolean } | null> {
    try {
      return await withRetry(LOCAL_RETRY, () =>
        on(async (client) => {
          if (readFirst) {
            const existing = await sql.selectProbe(client, scope);
            if (existing) return this.#replayLocal<T>(scope, fp, existing);
          }
          const outcome = await attempt(client);
          if (outcome.kind === 'nothing') return null;
          if (outcome.kind === 'found') {
            // The attempt left nothing open, so this autocommitted read sees the committed record.
            const winner = await sql.selectProbe(client, scope);
            if (!winner) throw new RaceRetry();
            return this.#replayLocal<T>(scope, fp, winner);
          }
          this.#emit('complete', scope, outcome.state);
          if (outcome.state === 'failed') throw new FinalFailure(outcome.value, { replayed: false });
          return { result: outcome.value as T, replayed: false };
        }),
      );
    } catch (err) {
      if (err instanceof RaceRetry) throw this.#inProgress(scope, LOCAL_RETRY_AFTER_MS);
      throw err;
    }
  }

  /**
   * The claiming statement's lock_timeout (55P03) means a duplicate holds the step: in_progress.
   * A 55P03 from the caller's own `fn` is the caller's error, so only the claim is wrapped.
   */
  async #claiming<R>(scope: Scope, claim: Promise<R>): Promise<R> {
    try {
      return await claim;
    } catch (err) {
      if (isSqlState(err, SQLSTATE.lockNotAvailable)) throw this.#inProgress(scope, LOCAL_RETRY_AFTER_MS);
      throw err;
    }
  }

  /**
   * runLocal's attempt: BEGIN + claim + `first` in one round trip, `fn`, then `withCommit`'s
   * statements + completion + COMMIT in one more. Leaves no transaction open.
   */
  #transactionAttempt<T extends Json>(
    scope: Scope,
    schemaVersion: number,
    fp: string,
    fn: (
      tx: PoolClient,
      first: pg.QueryResult[],
      withCommit: (statement: pg.QueryConfig) => void,
    ) => Promise<T>,
    first: LocalRunOptions['first'],
  ): (client: PoolClient) => Promise<LocalAttempt> {
    return async (client) => {
      let open = true;
      // A failed ROLLBACK means a dead connection (the pool discards it); it must not mask the real error.
      const rollback = async () => {
        open = false;
        await client.query('ROLLBACK').catch(() => undefined);
      };
      try {
        const ownerToken = randomUUID();
        const { claimed, first: firstResults } = await this.#claiming(
          scope,
          sql.beginLocalClaim(
            client,
            scope,
            {
              fingerprint: fp,
              schemaVersion,
              ownerToken,
              leaseMs: this.#leaseMs,
              lockTimeoutMs: this.#localWaitMs,
            },
            first,
          ),
        );
        if (!claimed) {
          // A failed `first` statement has aborted the transaction, and nothing in it is ours.
          await rollback();
          return { kind: 'found' };
        }
        this.#emit('claim', scope, 'local');

        let state: FinalState = 'succeeded';
        let value: unknown;
        let atCommit: pg.QueryConfig[] = [];
        try {
          // A first statement's error is the body's error: rolled back and rethrown below.
          const failed = firstResults.find((r) => r.status === 'rejected');
          if (failed) throw failed.reason;
          value = await fn(
            client,
            firstResults.map((r) => (r as PromiseFulfilledResult<pg.QueryResult>).value),
            (statement) => atCommit.push(statement),
          );
        } catch (err) {
          atCommit = [];
          if (!(err instanceof FinalFailure)) {
            await rollback();
            this.#emit('fail', scope, 'rolled_back');
            throw err;
          }
          state = 'failed';
          value = err.result;
        }
        const stored = toStoredJson(value, state === 'failed' ? 'FinalFailure.result' : 'result');
        // A completion that matches no row fails, so the COMMIT behind it rolls back: never a half-state.
        await sql.finishLocalClaimAndCommit(client, scope, ownerToken, state, stored.text, atCommit);
        open = false;
        return { kind: 'stored', state, value: stored.value };
      } finally {
        if (open) await rollback();
      }
    };
  }

  /**
   * runLocalStatement's attempt: the body and the record in one autocommitted statement.
   * A second attempt shape, kept because bench:e2e shows it pays (docs/BENCHMARKS.md, "Is a second
   * local-mode path worth it?").
   */
  #statementAttempt(
    scope: Scope,
    schemaVersion: number,
    fp: string,
    body: LocalStatement,
  ): (db: Queryable) => Promise<LocalAttempt> {
    return async (db) => {
      let row: { result: Json } | null;
      try {
        row = await this.#claiming(
          scope,
          sql.insertLocalStatement(
            db,
            scope,
            { fingerprint: fp, schemaVersion, lockTimeoutMs: this.#localWaitMs },
            body,
          ),
        );
      } catch (err) {
        // The record exists and is committed (the INSERT waited for it if it was not yet);
        // the failed statement took the body's writes with it.
        const onRecord =
          isSqlState(err, SQLSTATE.uniqueViolation) &&
          (err as pg.DatabaseError).constraint === 'operations_pkey';
        if (onRecord) return { kind: 'found' };
        throw err;
      }
      if (!row) return { kind: 'nothing' };
      this.#emit('claim', scope, 'local');
      return { kind: 'stored', state: 'succeeded', value: row.result };
    };
  }

  #replayLocal<T extends Json>(
    scope: Scope,
    fp: string,
    row: sql.ProbeRow,
  ): { result: T; replayed: boolean } {
    if (row.fingerprint !== fp) throw this.#conflict(scope);
    if (row.state === 'succeeded') {
      this.#emit('replay', scope, 'succeeded');
      return { result: row.result as T, replayed: true };
    }
    if (row.state === 'failed') {
      this.#emit('replay', scope, 'failed');
      throw new FinalFailure(row.result, { replayed: true });
    }
    // An unfinished record under a local scope belongs to an external claim: never act beside it.
    throw this.#inProgress(scope, retryAfter(row.lease_ms_left, LOCAL_RETRY_AFTER_MS));
  }

  // ------------------------------------------------------------- external mode

  /**
   * Claims the operation for one attempt (autocommitted). Returns a replay for a completed record;
   * throws conflict or in_progress. `takeover: true`: reconcile before performing.
   */
  async claim(scope: Scope, input: LedgerInput, opts: { leaseMs?: number } = {}): Promise<ClaimResult> {
    const fp = this.#prepare(scope, input);
    const leaseMs = timerMs(opts.leaseMs, this.#leaseMs, 'leaseMs');
    return this.#claim(scope, input.schemaVersion, fp, leaseMs);
  }

  async #claim(scope: Scope, schemaVersion: number, fp: string, leaseMs: number): Promise<ClaimResult> {
    const dk = downstreamKey(scope);
    try {
      return await withRetry(CLAIM_RACE_RETRY, () =>
        withClient(this.#pool, async (client): Promise<ClaimResult> => {
          const ownerToken = randomUUID();
          const row = await sql.upsertExternalClaim(client, scope, {
            fingerprint: fp,
            schemaVersion,
            ownerToken,
            leaseMs,
            downstreamKey: dk,
          });
          if (row) {
            const { inserted, ...rest } = row;
            this.#emit(inserted ? 'claim' : 'takeover', scope, inserted ? 'external' : rest.state);
            return { kind: 'claimed', ownerToken, takeover: !inserted, record: sql.toRecord(rest) };
          }
          const existing = await sql.selectProbe(client, scope);
          if (!existing) throw new RaceRetry(); // released or reaped between the two statements
          if (existing.fingerprint !== fp) throw this.#conflict(scope);
          if (isFinal(existing.state)) {
            const record = await sql.selectOperation(client, scope);
            if (!record) throw new RaceRetry();
            this.#emit('replay', scope, existing.state);
            return { kind: 'replay', record: sql.toRecord(record) };
          }
          if (existing.lease_ms_left !== null && existing.lease_ms_left > 0) {
            throw this.#inProgress(scope, retryAfter(existing.lease_ms_left, leaseMs));
          }
          // The lease expired between the two statements: try the takeover again.
          throw new RaceRetry();
        }),
      );
    } catch (err) {
      if (err instanceof RaceRetry) throw this.#inProgress(scope, 100);
      throw err;
    }
  }

  /** Fenced completion. A caller that lost its claim gets LedgerError('ownership_lost'). */
  async complete(scope: Scope, ownerToken: string, outcome: ExternalOutcome<Json>): Promise<OperationRecord> {
    validateScope(scope);
    if (outcome?.state !== 'succeeded' && outcome?.state !== 'failed') {
      throw new LedgerError('invalid_input', "outcome.state must be 'succeeded' or 'failed'");
    }
    const stored = toStoredJson(outcome.result, 'outcome.result');
    const row = await withClient(this.#pool, (client) =>
      sql.completeOwned(client, scope, ownerToken, {
        state: outcome.state,
        resultJson: stored.text,
        providerRef: outcome.providerRef ?? null,
      }),
    );
    if (!row) throw this.#ownershipLost(scope);
    this.#emit('complete', scope, outcome.state);
    return sql.toRecord(row);
  }

  /** Fenced: records that the outcome was lost; the record then needs reconcile. */
  async markUnknown(scope: Scope, ownerToken: string, error: Json): Promise<OperationRecord> {
    validateScope(scope);
    const stored = toStoredJson(error, 'error');
    const row = await withClient(this.#pool, (client) =>
      sql.markOwnedUnknown(client, scope, ownerToken, stored.text),
    );
    if (!row) throw this.#ownershipLost(scope);
    return sql.toRecord(row);
  }

  /**
   * Fenced: deletes a claim whose effect certainly did not happen. False if the caller no longer
   * owns it, or after a takeover (an earlier owner may still act under the key).
   */
  async release(scope: Scope, ownerToken: string): Promise<boolean> {
    validateScope(scope);
    return withClient(this.#pool, (client) => sql.deleteOwnedClaim(client, scope, ownerToken));
  }

  /**
   * Fenced lease renewal to now + leaseMs (database clock); ownership_lost when the caller no
   * longer owns the claim. runExternal renews on its own; call it only around `claim`.
   */
  async extend(scope: Scope, ownerToken: string, leaseMs?: number): Promise<Date> {
    validateScope(scope);
    const ms = timerMs(leaseMs, this.#leaseMs, 'leaseMs');
    const until = await withClient(this.#pool, (client) => sql.extendOwned(client, scope, ownerToken, ms));
    if (!until) throw this.#ownershipLost(scope, 'renewal');
    return until;
  }

  /**
   * Renews an owned claim's lease every `everyMs` while its attempt runs; `check()` renews once
   * more and throws ownership_lost if the claim is gone. A renewal that errors is retried next
   * tick: if the lease runs out meanwhile, fencing makes the takeover safe.
   */
  #keepAlive(
    scope: Scope,
    ownerToken: string,
    leaseMs: number,
    everyMs: number,
    heartbeat: (() => void) | undefined,
  ) {
    let lost = false;
    let renewing = false;
    let stopped = false;
    const timer = setInterval(() => {
      callHook(heartbeat);
      if (lost || renewing) return;
      renewing = true;
      withClient(this.#pool, (client) => sql.extendOwned(client, scope, ownerToken, leaseMs))
        .then((until) => {
          // A tick racing our own completion is refused too; that is not a lost claim.
          if (until || stopped) return;
          lost = true;
          this.#emit('ownership_lost', scope, 'renewal');
        })
        .catch(() => undefined) // retried on the next tick
        .finally(() => (renewing = false));
    }, everyMs);
    timer.unref();
    return {
      check: async (): Promise<void> => {
        if (lost) throw new LedgerError('ownership_lost', 'the lease renewal was refused', { scope });
        await this.extend(scope, ownerToken, leaseMs);
      },
      stop: () => {
        stopped = true;
        clearInterval(timer);
      },
    };
  }

  /**
   * Asks the provider about an owned, uncertain record. `settled`: stored. `not_found`: still
   * owned; the caller decides whether to perform. `unknown`: pending, or reconcile threw.
   */
  async #reconcileOwned<T extends Json>(
    scope: Scope,
    ownerToken: string,
    record: OperationRecord,
    reconcile: (ctx: ReconcileContext) => Promise<ReconcileOutcome<T>>,
  ): Promise<
    | { kind: 'settled'; record: OperationRecord }
    | { kind: 'not_found' }
    | { kind: 'unknown'; record: OperationRecord; error: LedgerError; threw: boolean }
  > {
    const dk = record.downstreamKey ?? downstreamKey(scope);
    let outcome: ReconcileOutcome<T>;
    try {
      outcome = await reconcile({ downstreamKey: dk, record });
    } catch (err) {
      this.#emit('reconcile', scope, 'error');
      const after = await this.#markUnknownKeepingError(scope, ownerToken, record, {
        reason: 'reconcile_error',
        message: errorMessage(err),
      });
      this.#emit('unknown', scope, 'reconcile_error');
      const error = new LedgerError('outcome_unknown', 'reconcile failed; the outcome is still unknown', {
        scope,
        cause: err,
      });
      return { kind: 'unknown', record: after, error, threw: true };
    }
    this.#emit('reconcile', scope, outcome.state);
    if (outcome.state === 'succeeded' || outcome.state === 'failed') {
      return { kind: 'settled', record: await this.complete(scope, ownerToken, outcome) };
    }
    if (outcome.state === 'not_found') return { kind: 'not_found' };
    const reason = outcome.state === 'pending' ? 'reconcile_pending' : 'reconcile_invalid';
    const after = await this.#markUnknownKeepingError(scope, ownerToken, record, { reason });
    this.#emit('unknown', scope, reason);
    const error = new LedgerError(
      'outcome_unknown',
      outcome.state === 'pending'
        ? 'the provider reports the operation pending; reconcile again later'
        : 'reconcile returned an unrecognised state',
      { scope },
    );
    return { kind: 'unknown', record: after, error, threw: false };
  }

  /** The first recorded reason for uncertainty is what operators need; later ones don't overwrite it. */
  #markUnknownKeepingError(
    scope: Scope,
    ownerToken: string,
    record: OperationRecord,
    error: Json,
  ): Promise<OperationRecord> {
    return this.markUnknown(scope, ownerToken, record.error ?? error);
  }

  /**
   * External mode: replay, or claim -> (takeover: reconcile first) -> perform under the downstream
   * key -> complete, all fenced.
   * - The lease is renewed while the claim is held, and once more right before perform unless the
   *   claim is fresh and younger than a renewal interval: a refused renewal throws ownership_lost
   *   without performing.
   * - After a `not_found` reconcile it performs under the SAME key only inside `opts.keyWindowMs`;
   *   outside, the record stays unknown (outcome_unknown).
   * - A definite failure from perform releases the claim and rethrows; any other error marks the
   *   record unknown and throws outcome_unknown (retryable; the next call reconciles).
   */
  async runExternal<T extends Json>(
    scope: Scope,
    input: LedgerInput,
    handlers: ExternalHandlers<T>,
    opts: ExternalRunOptions = {},
  ): Promise<ExternalRunResult<T>> {
    const fp = this.#prepare(scope, input);
    const leaseMs = timerMs(opts.leaseMs, this.#leaseMs, 'leaseMs');
    const keyWindowMs = timerMs(opts.keyWindowMs, DEFAULT_KEY_WINDOW_MS, 'keyWindowMs');
    // At most a third of the lease, so two renewals can fail before the lease runs out.
    const third = Math.max(10, Math.floor(leaseMs / 3));
    const renewEveryMs = Math.min(third, timerMs(opts.renewEveryMs, third, 'renewEveryMs'));
    // No heartbeat at the start: the attempt's start counts as one, and each is a server write.

    // No replay probe: external replays are rare, and the claim's conflict path answers them.
    const claim = await this.#claim(scope, input.schemaVersion, fp, leaseMs);
    if (claim.kind === 'replay') return this.#externalResult<T>(claim.record, true, false);
    const claimedAt = performance.now();
    const lease = this.#keepAlive(scope, claim.ownerToken, leaseMs, renewEveryMs, opts.heartbeat);
    // A fresh claim's own answer proves ownership as a renewal would, while less than a renewal
    // interval has passed since; a takeover reconciled first, so it renews (docs/MODEL.md).
    const stillOwned = () =>
      !claim.takeover && performance.now() - claimedAt < renewEveryMs ? Promise.resolve() : lease.check();
    try {
      return await this.#runClaimed(scope, claim, handlers, stillOwned, keyWindowMs);
    } finally {
      lease.stop();
    }
  }

  async #runClaimed<T extends Json>(
    scope: Scope,
    claim: Extract<ClaimResult, { kind: 'claimed' }>,
    handlers: ExternalHandlers<T>,
    stillOwned: () => Promise<void>,
    keyWindowMs: number,
  ): Promise<ExternalRunResult<T>> {
    const { ownerToken, record } = claim;
    if (claim.takeover) {
      const step = await this.#reconcileOwned(scope, ownerToken, record, handlers.reconcile);
      if (step.kind === 'settled') return this.#externalResult<T>(step.record, false, true);
      if (step.kind === 'unknown') throw step.error;
      // not_found: the provider never saw the downstream key; perform under the SAME key,
      // but only while the provider would still recognise it.
      if (!withinKeyWindow(record, keyWindowMs)) {
        await this.#markUnknownKeepingError(scope, ownerToken, record, { reason: 'key_window_passed' });
        this.#emit('unknown', scope, 'key_window_passed');
        throw new LedgerError(
          'outcome_unknown',
          "the provider has no record under the downstream key, but the record is past the provider's " +
            'key window: performing again could act twice; a human must resolve it',
          { scope },
        );
      }
    }

    // A claim lost while we reconciled (or the process was paused) must not act; the fenced renewal proves
    // it.
    await stillOwned();

    let outcome: ExternalOutcome<T>;
    try {
      outcome = await handlers.perform({
        downstreamKey: record.downstreamKey ?? downstreamKey(scope),
        attempt: record.attempts,
        ownerToken,
      });
    } catch (err) {
      // Nothing happened under the key, so release it; after a takeover an earlier owner may still
      // send, so the record stays and is reconciled (docs/MODEL.md F1).
      const definite = isDefiniteFailure(err);
      if (definite && (await this.release(scope, ownerToken))) {
        this.#emit('fail', scope, 'released');
        throw err;
      }
      await this.markUnknown(scope, ownerToken, { reason: 'perform_error', message: errorMessage(err) });
      this.#emit('unknown', scope, 'perform_error');
      // A definite failure kept here (after a takeover) is still the cause: it proves that THIS
      // request did nothing, and the caller may conclude that repeating it cannot help.
      throw new LedgerError(
        'outcome_unknown',
        definite
          ? `the provider refused this attempt's request (${errorMessage(err)}), but an earlier ` +
              'attempt may still act under the same key; it will be reconciled'
          : 'the provider call failed without a definite outcome; it will be reconciled',
        {
          scope,
          cause: err,
        },
      );
    }

    let completed: OperationRecord;
    try {
      completed = await this.complete(scope, ownerToken, outcome);
    } catch (err) {
      if (!isLedgerError(err, 'invalid_input')) throw err;
      // perform returned something we cannot store, but the effect may have happened.
      await this.markUnknown(scope, ownerToken, { reason: 'invalid_outcome', message: err.message });
      this.#emit('unknown', scope, 'perform_error');
      throw new LedgerError('outcome_unknown', 'perform returned an outcome that cannot be stored', {
        scope,
        cause: err,
      });
    }
    return this.#externalResult<T>(completed, false, false);
  }

  #externalResult<T extends Json>(
    record: OperationRecord,
    replayed: boolean,
    reconciled: boolean,
  ): ExternalRunResult<T> {
    if (!isFinal(record.state))
      throw new Error(`ledger invariant: expected a final record, got ${record.state}`);
    return {
      state: record.state,
      result: record.result as T,
      replayed,
      reconciled,
      providerRef: record.providerRef,
    };
  }

  /**
   * Reconciles an unresolved record (unknown, or an expired claim) without performing: settled,
   * pending, not_found (`performable`: still inside the key window) or skipped (final, or a live
   * lease). Throws not_found without a record, outcome_unknown when reconcile throws.
   */
  async reconcileUnresolved<T extends Json>(
    scope: Scope,
    reconcile: (ctx: ReconcileContext) => Promise<ReconcileOutcome<T>>,
    opts: { keyWindowMs?: number } = {},
  ): Promise<ReconcileUnresolvedResult> {
    validateScope(scope);
    const keyWindowMs = timerMs(opts.keyWindowMs, DEFAULT_KEY_WINDOW_MS, 'keyWindowMs');
    const ownerToken = randomUUID();
    const taken = await withClient(this.#pool, (client) =>
      sql.takeOverUnresolved(client, scope, ownerToken, this.#leaseMs),
    );
    if (!taken) {
      const current = await this.get(scope);
      if (!current) throw new LedgerError('not_found', 'no operation under this scope', { scope });
      return { record: current, answer: 'skipped', performable: false };
    }
    const record = sql.toRecord(taken);
    this.#emit('takeover', scope, record.state);
    const step = await this.#reconcileOwned(scope, ownerToken, record, reconcile);
    if (step.kind === 'settled') return { record: step.record, answer: 'settled', performable: false };
    if (step.kind === 'unknown') {
      if (step.threw) throw step.error;
      return { record: step.record, answer: 'pending', performable: false };
    }
    // not_found: never perform here; leave it unknown for runExternal under the same key.
    const performable = withinKeyWindow(record, keyWindowMs);
    const reason = performable ? 'reconcile_not_found' : 'key_window_passed';
    const after = await this.#markUnknownKeepingError(scope, ownerToken, record, { reason });
    this.#emit('unknown', scope, reason);
    return { record: after, answer: 'not_found', performable };
  }

  /**
   * Settles an unknown or expired record from outside (webhook, operator). Idempotent for the same
   * outcome; a different final outcome is invalid_state, a live claim in_progress. `tx`: commit
   * with the caller's audit row.
   */
  async settle(
    scope: Scope,
    outcome: ExternalOutcome<Json>,
    opts: { tx?: Queryable } = {},
  ): Promise<{ record: OperationRecord; changed: boolean; before: OperationRecord | null }> {
    validateScope(scope);
    if (outcome?.state !== 'succeeded' && outcome?.state !== 'failed') {
      throw new LedgerError('invalid_input', "outcome.state must be 'succeeded' or 'failed'");
    }
    const stored = toStoredJson(outcome.result, 'outcome.result');
    const run = async (db: Queryable) => {
      const beforeRow = await sql.selectOperationForUpdate(db, scope);
      if (!beforeRow) throw new LedgerError('not_found', 'no operation under this scope', { scope });
      const before = sql.toRecord(beforeRow);
      if (isFinal(before.state)) {
        const same =
          before.state === outcome.state &&
          canonicalJson(before.result) === canonicalJson(stored.value) &&
          (outcome.providerRef === undefined || outcome.providerRef === before.providerRef);
        if (!same) {
          throw new LedgerError(
            'invalid_state',
            `operation is already ${before.state} with a different outcome`,
            { scope },
          );
        }
        return { record: before, changed: false, before };
      }
      const leaseLeft = before.leaseExpiresAt ? before.leaseExpiresAt.getTime() - Date.now() : null;
      const row = await sql.settleUnowned(db, scope, {
        state: outcome.state,
        resultJson: stored.text,
        providerRef: outcome.providerRef ?? null,
      });
      if (!row) throw this.#inProgress(scope, retryAfter(leaseLeft, this.#leaseMs));
      this.#emit('reconcile', scope, `settled:${outcome.state}`);
      return { record: sql.toRecord(row), changed: true, before };
    };
    return opts.tx ? run(opts.tx) : withTransaction(this.#pool, run);
  }

  // ------------------------------------------------------------------ restore

  /**
   * Rebuilds a record a database restore lost, from a workflow's history: a final outcome, or
   * `unknown` for a step that may have acted (reconciled before it performs again). Never
   * overwrites: null when the key has a record.
   */
  async restore(
    scope: Scope,
    input: LedgerInput,
    record: {
      state: 'succeeded' | 'failed' | 'unknown';
      external: boolean;
      result?: Json;
      providerRef?: string | null;
      error?: Json;
      createdAt: Date;
      completedAt?: Date;
    },
    opts: { tx?: Queryable } = {},
  ): Promise<OperationRecord | null> {
    const fp = this.#prepare(scope, input);
    const final = record.state !== 'unknown';
    if (final && record.result === undefined) {
      throw new LedgerError('invalid_input', 'a final record needs its result');
    }
    const row = {
      fingerprint: fp,
      schemaVersion: input.schemaVersion,
      state: record.state,
      downstreamKey: record.external ? downstreamKey(scope) : null,
      providerRef: record.providerRef ?? null,
      resultJson: final ? toStoredJson(record.result, 'result').text : null,
      errorJson: record.error === undefined ? null : toStoredJson(record.error, 'error').text,
      createdAt: record.createdAt,
      completedAt: final ? (record.completedAt ?? record.createdAt) : null,
    };
    const inserted = opts.tx
      ? await sql.insertRestored(opts.tx, scope, row)
      : await withClient(this.#pool, (c) => sql.insertRestored(c, scope, row));
    return inserted ? sql.toRecord(inserted) : null;
  }

  // ------------------------------------------------------------------ reading

  async get(scope: Scope, tx?: Queryable): Promise<OperationRecord | null> {
    validateScope(scope);
    const row = tx
      ? await sql.selectOperation(tx, scope)
      : await withClient(this.#pool, (c) => sql.selectOperation(c, scope));
    return row ? sql.toRecord(row) : null;
  }

  /**
   * The records of these keys of one tenant, oldest first, each found by its
   * primary key (so the cost does not grow with the tenant's history).
   */
  async getMany(
    tenantId: string,
    refs: readonly { operationType: string; key: string }[],
    /** Where to read: a transaction, or a client sending it with others (onceflow/postgres `pipelined`). */
    db?: Queryable,
  ): Promise<OperationRecord[]> {
    if (refs.length > MAX_LIST_LIMIT) {
      throw new LedgerError('invalid_input', `at most ${MAX_LIST_LIMIT} keys per read`);
    }
    const rows = db
      ? await sql.selectOperationsByKeys(db, tenantId, refs)
      : await withClient(this.#pool, (c) => sql.selectOperationsByKeys(c, tenantId, refs));
    return rows.map(sql.toRecord);
  }

  async list(filter: ListFilter = {}): Promise<OperationRecord[]> {
    const limit = Math.min(MAX_LIST_LIMIT, positiveInt(filter.limit, 100, 'limit'));
    const rows = await withClient(this.#pool, (c) => sql.listOperations(c, { ...filter, limit }));
    return rows.map(sql.toRecord);
  }

  async oldestAgeSeconds(state: 'in_progress' | 'unknown'): Promise<number | null> {
    return withClient(this.#pool, (c) => sql.selectOldestAgeSeconds(c, state));
  }

  // ---------------------------------------------------------------- retention

  /**
   * Deletes final records completed over `olderThanMs` ago, in short batches so locks are brief.
   * Never touches `in_progress` or `unknown` records.
   */
  async reap(opts: ReapOptions): Promise<ReapResult> {
    if (!Number.isFinite(opts.olderThanMs) || opts.olderThanMs < 0) {
      throw new LedgerError('invalid_input', 'olderThanMs must be a non-negative number');
    }
    const batchSize = positiveInt(opts.batchSize, 1000, 'batchSize');
    const maxBatches = positiveInt(opts.maxBatches, 100, 'maxBatches');
    const total: ReapResult = { deleted: 0, batches: 0, byState: { succeeded: 0, failed: 0 } };
    while (total.batches < maxBatches) {
      const batch = await withClient(this.#pool, (c) => sql.deleteReapBatch(c, opts.olderThanMs, batchSize));
      total.batches++;
      total.byState.succeeded += batch.succeeded;
      total.byState.failed += batch.failed;
      const n = batch.succeeded + batch.failed;
      total.deleted += n;
      if (n < batchSize) break;
    }
    return total;
  }
}
