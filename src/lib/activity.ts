/**
 * `onceflow/activity`: the step helpers a Temporal activity needs around the
 * ledger. Claim-then-act with Temporal's retry semantics:
 * - runLocalStep: the business write and the ledger completion in one transaction;
 * - runExternalStep: claim, call the provider under the downstream key, complete
 *   or mark unknown; while the call runs the activity heartbeats and the lease
 *   is extended (heartbeatRenewal);
 * - toActivityFailure: ledger errors become ApplicationFailures (LEDGER_FAILURE
 *   types): permanent ones non-retryable, transient ones retryable.
 * Activities only: this module imports @temporalio/activity and the database.
 */
import { ApplicationFailure, Context } from '@temporalio/activity';
import type pg from 'pg';
import { FinalFailure, LedgerError } from '../ledger/errors.ts';
import type { Ledger } from '../ledger/ledger.ts';
import type {
  ExternalHandlers,
  ExternalRunOptions,
  ExternalRunResult,
  Json,
  LedgerInput,
  LocalRunOptions,
  Scope,
} from '../ledger/types.ts';
import type { PoolClient } from '../db/index.ts';
import { LEDGER_FAILURE } from './failures.ts';

export { LEDGER_FAILURE } from './failures.ts';

/**
 * Heartbeats to Temporal, and renews the step's lease, while an external
 * step runs: at least twice per heartbeat timeout (the ledger caps it at a
 * third of the lease). Without a heartbeat timeout the lease is still renewed.
 * Call it inside an activity (it reads Context.current()).
 */
export function heartbeatRenewal(): Pick<ExternalRunOptions, 'heartbeat' | 'renewEveryMs'> {
  const ctx = Context.current();
  const timeout = ctx.info.heartbeatTimeoutMs;
  return {
    heartbeat: () => ctx.heartbeat(),
    ...(timeout ? { renewEveryMs: Math.max(10, Math.floor(timeout / 2)) } : {}),
  };
}

/**
 * Maps a LedgerError, or a local step's FinalFailure, onto Temporal's retry
 * semantics; any other error is returned unchanged (Temporal retries it, or
 * the caller maps it first).
 * `outcomeUnknownType` names the unknown outcome of this step (default
 * LEDGER_FAILURE.outcomeUnknown), so a workflow can reconcile per step.
 */
export function toActivityFailure(
  err: unknown,
  outcomeUnknownType: string = LEDGER_FAILURE.outcomeUnknown,
): unknown {
  if (err instanceof FinalFailure) {
    // The stored business outcome travels as the failure's details; every retry would replay it.
    return ApplicationFailure.create({
      type: LEDGER_FAILURE.finalFailure,
      message: err.message,
      nonRetryable: true,
      details: [err.result],
    });
  }
  if (!(err instanceof LedgerError)) return err;
  switch (err.code) {
    case 'outcome_unknown':
      return ApplicationFailure.create({ type: outcomeUnknownType, message: err.message, cause: err });
    case 'in_progress':
    case 'ownership_lost':
      return ApplicationFailure.create({
        type: LEDGER_FAILURE.inProgress,
        message: err.message,
        cause: err,
        ...(err.retryAfterMs ? { nextRetryDelay: err.retryAfterMs } : {}),
      });
    case 'conflict':
      return ApplicationFailure.create({
        type: LEDGER_FAILURE.conflict,
        message: err.message,
        nonRetryable: true,
      });
    case 'invalid_key':
    case 'invalid_input':
      return ApplicationFailure.create({
        type: LEDGER_FAILURE.invalidInput,
        message: err.message,
        nonRetryable: true,
      });
    default:
      return ApplicationFailure.create({
        type: LEDGER_FAILURE.ledgerError,
        message: err.message,
        cause: err,
      });
  }
}

/**
 * Local mode inside an activity: `fn`'s writes (through `tx`) and the step's
 * completion commit in one transaction, once per scope; a retry gets the
 * stored result (`replayed: true`). Ledger errors, and a FinalFailure
 * thrown by `fn` (committed as the step's `failed` outcome), are thrown as
 * ApplicationFailures; `fn`'s other errors roll back and are rethrown unchanged.
 */
export async function runLocalStep<T extends Json>(
  ledger: Ledger,
  scope: Scope,
  input: LedgerInput,
  fn: (tx: PoolClient, first: pg.QueryResult[]) => Promise<T>,
  opts?: LocalRunOptions,
): Promise<{ result: T; replayed: boolean }> {
  try {
    return await ledger.runLocal(scope, input, fn, opts);
  } catch (err) {
    throw toActivityFailure(err);
  }
}

/**
 * External mode inside an activity: claims the scope, then `handlers.perform`
 * calls the provider under `ctx.downstreamKey` (the same for every attempt);
 * a lost outcome is marked unknown and the next attempt runs
 * `handlers.reconcile` before anything else. Heartbeats and extends the
 * lease while it runs (heartbeatRenewal). Ledger errors are thrown as
 * ApplicationFailures (`outcomeUnknownType` for a lost outcome).
 */
export async function runExternalStep<T extends Json>(
  ledger: Ledger,
  scope: Scope,
  input: LedgerInput,
  handlers: ExternalHandlers<T>,
  opts: Omit<ExternalRunOptions, 'heartbeat' | 'renewEveryMs'> & { outcomeUnknownType?: string } = {},
): Promise<ExternalRunResult<T>> {
  const { outcomeUnknownType, ...runOpts } = opts;
  try {
    return await ledger.runExternal(scope, input, handlers, { ...runOpts, ...heartbeatRenewal() });
  } catch (err) {
    throw toActivityFailure(err, outcomeUnknownType);
  }
}
