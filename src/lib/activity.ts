/**
 * `onceflow/activity`: the step helpers a Temporal activity needs around the
 * ledger. Claim-then-act with Temporal's retry semantics:
 * - claimStep + holdClaim: a hand-written attempt's claim, kept alive by
 *   heartbeats that extend its lease;
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
import { DEFAULT_LEASE_MS, type Ledger } from '../ledger/ledger.ts';
import type {
  ClaimResult,
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
 * third of the lease). Without a heartbeat timeout, or in a local activity,
 * the lease is still renewed.
 * Call it inside an activity (it reads Context.current()).
 */
export function heartbeatRenewal(): Pick<ExternalRunOptions, 'heartbeat' | 'renewEveryMs'> {
  const ctx = Context.current();
  // A local activity has no heartbeat (its worker keeps the workflow task alive instead):
  // the lease alone is renewed, at the ledger's default pace.
  if (ctx.info.isLocal) return {};
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
 * Claims a step for a hand-written attempt (when runExternalStep's shape does
 * not fit): the ledger's claim, with its errors thrown as ApplicationFailures.
 * A `claimed` result is the caller's to finish with ledger.complete,
 * markUnknown or release; hold it with holdClaim meanwhile. `takeover: true`:
 * an earlier attempt's outcome is uncertain, so reconcile before performing.
 */
export async function claimStep(
  ledger: Ledger,
  scope: Scope,
  input: LedgerInput,
  opts: { leaseMs?: number } = {},
): Promise<ClaimResult> {
  try {
    return await ledger.claim(scope, input, opts);
  } catch (err) {
    throw toActivityFailure(err);
  }
}

export interface HeldClaim {
  /**
   * Renews the lease once more and throws (an ApplicationFailure, retryable)
   * if the claim is no longer this attempt's: call it right before acting.
   */
  check(): Promise<void>;
  /** Stops heartbeating and renewing; call it when the attempt is done, in `finally`. */
  stop(): void;
}

/**
 * Keeps a claim from claimStep alive while the activity works: heartbeats to
 * Temporal and extends the lease (ledger.extend) on every tick, at least
 * twice per heartbeat timeout and at most every third of the lease. A
 * refused extension (the claim was taken over, completed or released) is
 * remembered and reported by `check()`; one that fails for another reason
 * (the database is unreachable) is tried again on the next tick, and
 * fencing keeps a takeover safe if the lease runs out meanwhile.
 * `leaseMs`: the claim's lease, when it is not the ledger's default.
 */
export function holdClaim(
  ledger: Ledger,
  scope: Scope,
  ownerToken: string,
  opts: { leaseMs?: number } = {},
): HeldClaim {
  const { heartbeat, renewEveryMs } = heartbeatRenewal();
  const third = Math.max(10, Math.floor((opts.leaseMs ?? DEFAULT_LEASE_MS) / 3));
  const everyMs = Math.min(third, renewEveryMs ?? third);
  let lost = false;
  let renewing = false;
  const timer = setInterval(() => {
    heartbeat?.();
    if (lost || renewing) return;
    renewing = true;
    ledger
      .extend(scope, ownerToken, opts.leaseMs)
      .catch((err: unknown) => {
        if (err instanceof LedgerError && err.code === 'ownership_lost') lost = true;
      })
      .finally(() => (renewing = false));
  }, everyMs);
  timer.unref();
  return {
    async check() {
      try {
        if (lost) throw new LedgerError('ownership_lost', 'the lease extension was refused', { scope });
        await ledger.extend(scope, ownerToken, opts.leaseMs);
      } catch (err) {
        throw toActivityFailure(err);
      }
    },
    stop: () => clearInterval(timer),
  };
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
