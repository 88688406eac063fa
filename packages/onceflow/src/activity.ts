/**
 * The steps, inside a Temporal activity. Claim-then-act with Temporal's retry
 * semantics, under a key derived from the running workflow:
 * - externalStep: claim, call the provider under the downstream key, complete
 *   or mark unknown; the next attempt after a lost outcome reconciles first.
 *   While the call runs the activity heartbeats and the lease is extended.
 * - localStep: the business write and the step's completion in one transaction.
 * - toActivityFailure: ledger errors become ApplicationFailures (LEDGER_FAILURE
 *   types): permanent ones non-retryable, transient ones retryable.
 */
import { ApplicationFailure, Context } from '@temporalio/activity';
import { FinalFailure, LedgerError } from './errors.ts';
import type { Ledger } from './ledger.ts';
import type { ExternalHandlers, ExternalRunOptions, ExternalRunResult, Json, Scope } from './types.ts';
import type { PoolClient } from './db.ts';
import { LEDGER_FAILURE } from './failures.ts';
import { stepKey } from './keys.ts';

/** Heartbeat at least twice per heartbeat timeout while an external step runs; call inside an activity. */
export function heartbeatRenewal(): Pick<ExternalRunOptions, 'heartbeat' | 'renewEveryMs'> {
  const ctx = Context.current();
  // A local activity has no heartbeat: the lease alone is renewed.
  if (ctx.info.isLocal) return {};
  const timeout = ctx.info.heartbeatTimeoutMs;
  return {
    heartbeat: () => ctx.heartbeat(),
    ...(timeout ? { renewEveryMs: Math.max(10, Math.floor(timeout / 2)) } : {}),
  };
}

/**
 * Maps a LedgerError or FinalFailure onto Temporal's retry semantics; other errors pass unchanged.
 * `outcomeUnknownType` lets a workflow reconcile per step.
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

/** What names a step: its scope beyond the key, and the version of its input's meaning. */
export interface StepOptions {
  /** The tenant the step belongs to (part of its scope: two tenants never share a step). Default `'default'`. */
  tenant?: string;
  /** The operation type (part of its scope and of the fingerprint). Default the step name's first part. */
  type?: string;
  /** Version of the input's meaning: bump it when a field's meaning changes. Default 1. */
  schemaVersion?: number;
  /** Where the step logs; default the activity's own logger (`Context.current().log`). */
  log?: StepLogger;
}

/** The logger shape a step writes to: Temporal's activity logger fits it. */
export interface StepLogger {
  info(message: string, attrs?: Record<string, unknown>): void;
  warn(message: string, attrs?: Record<string, unknown>): void;
}

export interface ExternalStepOptions<T extends Json> extends StepOptions, ExternalHandlers<T> {
  /** What the step does, validated: fingerprinted, so the same key with other input is a conflict. */
  input: unknown;
  /** This attempt's lease; default the ledger's. */
  leaseMs?: number;
  /** How long the provider remembers a downstream key; default 24 h. See ExternalRunOptions. */
  keyWindowMs?: number;
  /** The ApplicationFailure type of a lost outcome; default LEDGER_FAILURE.outcomeUnknown. */
  unknownFailureType?: string;
}

export interface LocalStepOptions<T extends Json> extends StepOptions {
  /** What the step does, validated: fingerprinted, so the same key with other input is a conflict. */
  input: unknown;
  /**
   * The business write, through `tx`: it commits with the step's completion, once per key. Throw
   * a FinalFailure to store a final business failure (replayed on every retry).
   */
  run(tx: PoolClient): Promise<T>;
}

/** A step name: `charge`, or `status/paid` for one of a repeated step's instances. */
function splitName(name: string): [string, ...string[]] {
  const [step, ...parts] = name.split('/');
  return [step!, ...parts];
}

/**
 * `<workflowId>/<name>` of the running activity: the workflow ID, so it survives retry, reset and
 * continue-as-new.
 */
export function currentStepKey(name: string): string {
  const workflowId = Context.current().info.workflowExecution?.workflowId;
  if (!workflowId) throw new TypeError('currentStepKey: the activity has no workflow execution');
  const [step, ...parts] = splitName(name);
  return stepKey(workflowId, step, ...parts);
}

function stepScope(name: string, opts: StepOptions): Scope {
  return {
    tenantId: opts.tenant ?? 'default',
    operationType: opts.type ?? splitName(name)[0],
    key: currentStepKey(name),
  };
}

/**
 * An external effect made at most once per step: claims `<workflowId>/<name>`, then `perform` calls
 * the provider under `ctx.downstreamKey`. A lost outcome fails this attempt (retryable); the next
 * one reconciles first and performs again only if the provider never saw the key, inside its window.
 */
export async function externalStep<T extends Json>(
  ledger: Ledger,
  name: string,
  opts: ExternalStepOptions<T>,
): Promise<ExternalRunResult<T>> {
  const scope = stepScope(name, opts);
  const log = opts.log ?? Context.current().log;
  try {
    const run = await ledger.runExternal(
      scope,
      { schemaVersion: opts.schemaVersion ?? 1, value: opts.input },
      { perform: opts.perform, reconcile: opts.reconcile },
      {
        ...(opts.leaseMs !== undefined ? { leaseMs: opts.leaseMs } : {}),
        ...(opts.keyWindowMs !== undefined ? { keyWindowMs: opts.keyWindowMs } : {}),
        ...heartbeatRenewal(),
      },
    );
    log.info('step finished', {
      key: scope.key,
      state: run.state,
      replayed: run.replayed,
      reconciled: run.reconciled,
    });
    return run;
  } catch (err) {
    const failure = toActivityFailure(err, opts.unknownFailureType);
    log.warn('step did not finish', {
      key: scope.key,
      error: err instanceof Error ? err.message : String(err),
      ...(failure instanceof ApplicationFailure ? { failureType: failure.type } : {}),
    });
    throw failure;
  }
}

/**
 * A write in this Postgres, once per step: `run`'s writes and the completion under
 * `<workflowId>/<name>` commit together, so a retry replays. Ledger errors and FinalFailure become
 * ApplicationFailures; other errors roll back and are rethrown.
 */
export async function localStep<T extends Json>(
  ledger: Ledger,
  name: string,
  opts: LocalStepOptions<T>,
): Promise<{ result: T; replayed: boolean }> {
  const scope = stepScope(name, opts);
  try {
    // A retried attempt most likely finds its record: one read answers it.
    const readFirst = Context.current().info.attempt > 1;
    return await ledger.runLocal(
      scope,
      { schemaVersion: opts.schemaVersion ?? 1, value: opts.input },
      (tx) => opts.run(tx),
      { readFirst },
    );
  } catch (err) {
    throw toActivityFailure(err);
  }
}
