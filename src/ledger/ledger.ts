/**
 * The operation ledger: makes an operation happen once per scope, in local
 * mode (one transaction with the business write) or external mode (claim,
 * perform with a stable downstream key, complete; reconcile before any retry
 * of an uncertain outcome). Vocabulary: see the Terminology block in types.ts.
 */
import { randomUUID } from 'node:crypto';
import {
  SQLSTATE,
  isSqlState,
  withClient,
  withTransaction,
  type Pool,
  type PoolClient,
  type Queryable,
} from '../db/index.ts';
import { canonicalJson, downstreamKey, fingerprint, toStoredJson, validateScope } from './canonical.ts';
import { FinalFailure, LedgerError, isDefiniteFailure, isLedgerError } from './errors.ts';
import * as sql from './sql.ts';
import type {
  ClaimResult,
  ExternalHandlers,
  ExternalOutcome,
  ExternalRunResult,
  Json,
  LedgerEvent,
  LedgerHooks,
  LedgerInput,
  LedgerOptions,
  ListFilter,
  OperationRecord,
  ReapOptions,
  ReapResult,
  ReconcileContext,
  ReconcileOutcome,
  Scope,
} from './types.ts';

/**
 * Default retention of completed records: 7 days. It must cover the longest
 * retry horizon of any caller (HTTP clients, workflows) and be at least the
 * provider's 24 h idempotency-key window, so that a late retry still finds
 * its record instead of running again.
 */
export const DEFAULT_RETENTION_MS = 7 * 24 * 60 * 60 * 1000;
export const DEFAULT_LEASE_MS = 30_000;
export const DEFAULT_LOCAL_WAIT_MS = 5_000;

/** Serialization failures and deadlocks mean "run the transaction again" (bounded, as in withTransaction). */
const LOCAL_RETRIES = 3;
/** Claim/read races (a row vanishing or a lease expiring between two statements) are retried this often. */
const CLAIM_RACE_RETRIES = 3;
/** retry-after hint for a local duplicate that outwaited localWaitMs. */
const LOCAL_RETRY_AFTER_MS = 1_000;

function positiveInt(value: number | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value <= 0)
    throw new LedgerError('invalid_input', `${name} must be a positive integer`);
  return value;
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

/** Internal signal: the row we conflicted with vanished before we could read it; start over. */
class RaceRetry extends Error {}

export class Ledger {
  readonly #pool: Pool;
  readonly #hooks: LedgerHooks;
  readonly #leaseMs: number;
  readonly #localWaitMs: number;

  constructor(pool: Pool, options: LedgerOptions = {}) {
    this.#pool = pool;
    this.#hooks = options.hooks ?? {};
    this.#leaseMs = positiveInt(options.leaseMs, DEFAULT_LEASE_MS, 'leaseMs');
    this.#localWaitMs = positiveInt(options.localWaitMs, DEFAULT_LOCAL_WAIT_MS, 'localWaitMs');
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

  #ownershipLost(scope: Scope): LedgerError {
    this.#emit('ownership_lost', scope);
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
   * The first caller gets the JSON round trip of its result, exactly what a replay returns.
   */
  async runLocal<T extends Json>(
    scope: Scope,
    input: LedgerInput,
    fn: (tx: PoolClient) => Promise<T>,
  ): Promise<{ result: T; replayed: boolean }> {
    const fp = this.#prepare(scope, input);
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.#runLocalOnce(scope, input.schemaVersion, fp, fn);
      } catch (err) {
        const retryable =
          err instanceof RaceRetry ||
          isSqlState(err, SQLSTATE.serializationFailure) ||
          isSqlState(err, SQLSTATE.deadlockDetected);
        if (!retryable || attempt >= LOCAL_RETRIES) {
          if (err instanceof RaceRetry) throw this.#inProgress(scope, LOCAL_RETRY_AFTER_MS);
          throw err;
        }
        await new Promise((r) => setTimeout(r, 10 * 2 ** attempt + Math.random() * 20));
      }
    }
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
    // A committed unfinished record under a local scope: an external-mode claim
    // (or an unknown) owns it; we must not run a second effect beside it.
    throw this.#inProgress(scope, retryAfter(row.lease_ms_left, LOCAL_RETRY_AFTER_MS));
  }

  #runLocalOnce<T extends Json>(
    scope: Scope,
    schemaVersion: number,
    fp: string,
    fn: (tx: PoolClient) => Promise<T>,
  ): Promise<{ result: T; replayed: boolean }> {
    return withClient(this.#pool, async (client) => {
      // Replays are answered by one primary-key read, outside any transaction.
      const existing = await sql.selectProbe(client, scope);
      if (existing) return this.#replayLocal<T>(scope, fp, existing);

      await client.query('BEGIN'); // the claim INSERT bounds its own wait (see insertLocalClaim)
      let open = true;
      // A failed ROLLBACK means a dead connection (the pool discards it); it must not mask the real error.
      const rollback = async () => {
        open = false;
        await client.query('ROLLBACK').catch(() => undefined);
      };
      try {
        const ownerToken = randomUUID();
        let claimed: boolean;
        try {
          claimed = await sql.insertLocalClaim(client, scope, {
            fingerprint: fp,
            schemaVersion,
            ownerToken,
            leaseMs: this.#leaseMs,
            lockTimeoutMs: this.#localWaitMs,
          });
        } catch (err) {
          // 55P03: a duplicate still holds its uncommitted claim after localWaitMs.
          if (isSqlState(err, SQLSTATE.lockNotAvailable)) {
            await rollback();
            throw this.#inProgress(scope, LOCAL_RETRY_AFTER_MS);
          }
          throw err;
        }
        if (!claimed) {
          // We waited on a duplicate's row and it committed (or it committed
          // between our probe and insert). This statement gets a fresh snapshot
          // (READ COMMITTED), so it sees the winner's committed record.
          const winner = await sql.selectProbe(client, scope);
          await rollback();
          if (!winner) throw new RaceRetry();
          return this.#replayLocal<T>(scope, fp, winner);
        }
        this.#emit('claim', scope, 'local');

        let state: 'succeeded' | 'failed' = 'succeeded';
        let value: unknown;
        try {
          value = await fn(client);
        } catch (err) {
          if (!(err instanceof FinalFailure)) {
            await rollback();
            this.#emit('fail', scope, 'rolled_back');
            throw err;
          }
          state = 'failed';
          value = err.result;
        }
        const stored = toStoredJson(value, state === 'failed' ? 'FinalFailure.result' : 'result');
        if (!(await sql.finishLocalClaim(client, scope, ownerToken, state, stored.text))) {
          // Unreachable while we hold the uncommitted row; refuse rather than commit a half-state.
          throw new Error('ledger invariant: local claim vanished inside its own transaction');
        }
        open = false;
        await client.query('COMMIT');
        this.#emit('complete', scope, state);
        if (state === 'failed') throw new FinalFailure(stored.value, { replayed: false });
        return { result: stored.value as T, replayed: false };
      } finally {
        if (open) {
          // Any other exit (fn's error is already handled above) leaves nothing behind.
          await client.query('ROLLBACK').catch(() => undefined);
        }
      }
    });
  }

  // ------------------------------------------------------------- external mode

  /**
   * Claims the operation for one attempt (autocommitted, visible to all).
   * Returns a replay for a completed record; throws conflict for another
   * input, in_progress (with the lease's remaining time) for a live claim.
   * `takeover: true` means the previous attempt's outcome is uncertain:
   * reconcile before performing.
   */
  async claim(scope: Scope, input: LedgerInput, opts: { leaseMs?: number } = {}): Promise<ClaimResult> {
    const fp = this.#prepare(scope, input);
    const leaseMs = positiveInt(opts.leaseMs, this.#leaseMs, 'leaseMs');
    return this.#claim(scope, input.schemaVersion, fp, leaseMs);
  }

  async #claim(scope: Scope, schemaVersion: number, fp: string, leaseMs: number): Promise<ClaimResult> {
    const dk = downstreamKey(scope);
    return withClient(this.#pool, async (client) => {
      for (let i = 0; i < CLAIM_RACE_RETRIES; i++) {
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
        if (!existing) continue; // released or reaped between the two statements
        if (existing.fingerprint !== fp) throw this.#conflict(scope);
        if (isFinal(existing.state)) {
          const record = await sql.selectOperation(client, scope);
          if (!record) continue;
          this.#emit('replay', scope, existing.state);
          return { kind: 'replay', record: sql.toRecord(record) };
        }
        if (existing.lease_ms_left !== null && existing.lease_ms_left > 0) {
          throw this.#inProgress(scope, retryAfter(existing.lease_ms_left, leaseMs));
        }
        // The lease expired between the two statements: try the takeover again.
      }
      throw this.#inProgress(scope, 100);
    });
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
   * Fenced: releases a claim whose effect certainly did not happen (deletes
   * the record), so the next attempt starts fresh under the same downstream
   * key. Returns false if the caller no longer owns it.
   */
  async release(scope: Scope, ownerToken: string): Promise<boolean> {
    validateScope(scope);
    return withClient(this.#pool, (client) => sql.deleteOwnedClaim(client, scope, ownerToken));
  }

  /**
   * Asks the provider about an owned, uncertain record before anything else
   * happens to it. `settled`: the outcome is stored. `not_found`: the provider
   * never saw the downstream key; the record is still owned by the caller,
   * who decides whether to perform. `unknown`: pending at the provider, or
   * reconcile threw; the record is `unknown` again (keeping the earliest
   * recorded error) and `error` says why.
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
   * External mode, end to end: replay, or claim -> (takeover: reconcile
   * first) -> perform with the downstream key -> complete, all fenced.
   * perform throwing a definite failure (isDefiniteFailure) releases the
   * claim and rethrows; any other error marks the record unknown and throws
   * LedgerError('outcome_unknown') (retryable; the next call reconciles).
   */
  async runExternal<T extends Json>(
    scope: Scope,
    input: LedgerInput,
    handlers: ExternalHandlers<T>,
    opts: { leaseMs?: number } = {},
  ): Promise<ExternalRunResult<T>> {
    const fp = this.#prepare(scope, input);
    const leaseMs = positiveInt(opts.leaseMs, this.#leaseMs, 'leaseMs');

    // Fast path: a completed operation is one primary-key read.
    const probe = await withClient(this.#pool, (client) => sql.selectProbe(client, scope));
    if (probe && probe.fingerprint !== fp) throw this.#conflict(scope);
    if (probe && isFinal(probe.state)) {
      this.#emit('replay', scope, probe.state);
      return {
        state: probe.state,
        result: probe.result as T,
        replayed: true,
        reconciled: false,
        providerRef: probe.provider_ref,
      };
    }

    const claim = await this.#claim(scope, input.schemaVersion, fp, leaseMs);
    if (claim.kind === 'replay') return this.#externalResult<T>(claim.record, true, false);
    const { ownerToken, record } = claim;

    if (claim.takeover) {
      const step = await this.#reconcileOwned(scope, ownerToken, record, handlers.reconcile);
      if (step.kind === 'settled') return this.#externalResult<T>(step.record, false, true);
      if (step.kind === 'unknown') throw step.error;
      // not_found: the provider never saw the downstream key; perform under the SAME key.
    }

    let outcome: ExternalOutcome<T>;
    try {
      outcome = await handlers.perform({
        downstreamKey: record.downstreamKey ?? downstreamKey(scope),
        attempt: record.attempts,
        ownerToken,
      });
    } catch (err) {
      if (isDefiniteFailure(err)) {
        await this.release(scope, ownerToken);
        this.#emit('fail', scope, 'released');
        throw err;
      }
      await this.markUnknown(scope, ownerToken, { reason: 'perform_error', message: errorMessage(err) });
      this.#emit('unknown', scope, 'perform_error');
      throw new LedgerError(
        'outcome_unknown',
        'the provider call failed without a definite outcome; it will be reconciled',
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
   * Reconciles an unresolved record (unknown, or a claim whose lease expired)
   * without ever performing. Returns the record afterwards: settled, or still
   * `unknown` (pending / not_found at the provider: re-drive with runExternal,
   * which performs under the same downstream key). A final record, or one
   * another attempt holds a live lease on, is returned unchanged.
   * Throws not_found when there is no record, outcome_unknown when reconcile throws.
   */
  async reconcileOnly<T extends Json>(
    scope: Scope,
    reconcile: (ctx: ReconcileContext) => Promise<ReconcileOutcome<T>>,
  ): Promise<OperationRecord> {
    validateScope(scope);
    const ownerToken = randomUUID();
    const taken = await withClient(this.#pool, (client) =>
      sql.takeOverUnresolved(client, scope, ownerToken, this.#leaseMs),
    );
    if (!taken) {
      const current = await this.get(scope);
      if (!current) throw new LedgerError('not_found', 'no operation under this scope', { scope });
      return current;
    }
    const record = sql.toRecord(taken);
    this.#emit('takeover', scope, record.state);
    const step = await this.#reconcileOwned(scope, ownerToken, record, reconcile);
    if (step.kind === 'settled') return step.record;
    if (step.kind === 'unknown') {
      if (step.threw) throw step.error;
      return step.record; // pending: still unknown, reconcile again later
    }
    // not_found: never perform here; leave it unknown for a re-drive under the same key.
    const after = await this.#markUnknownKeepingError(scope, ownerToken, record, {
      reason: 'reconcile_not_found',
    });
    this.#emit('unknown', scope, 'reconcile_not_found');
    return after;
  }

  /**
   * Settles an unresolved record from outside (provider webhook, operator):
   * unknown, or a claim whose lease expired. Idempotent for the same outcome
   * (changed: false); a final record with a different outcome is refused
   * (invalid_state); a live claim is refused (in_progress: its owner will
   * complete it). Pass `tx` to commit with the caller's audit row.
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

  // ------------------------------------------------------------------ reading

  async get(scope: Scope, tx?: Queryable): Promise<OperationRecord | null> {
    validateScope(scope);
    const row = tx
      ? await sql.selectOperation(tx, scope)
      : await withClient(this.#pool, (c) => sql.selectOperation(c, scope));
    return row ? sql.toRecord(row) : null;
  }

  async list(filter: ListFilter = {}): Promise<OperationRecord[]> {
    const limit = Math.min(1000, positiveInt(filter.limit, 100, 'limit'));
    const rows = await withClient(this.#pool, (c) => sql.listOperations(c, { ...filter, limit }));
    return rows.map(sql.toRecord);
  }

  async oldestAgeSeconds(state: 'in_progress' | 'unknown'): Promise<number | null> {
    return withClient(this.#pool, (c) => sql.selectOldestAgeSeconds(c, state));
  }

  // ---------------------------------------------------------------- retention

  /**
   * Deletes `succeeded`/`failed` records whose completed_at is older than
   * `olderThanMs`, in batches of `batchSize` (each its own short statement,
   * so locks are brief), at most `maxBatches` per call. Never touches
   * `in_progress` or `unknown` records.
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
