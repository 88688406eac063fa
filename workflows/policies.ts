/**
 * Timeouts and retry policies for the order workflow, declared once.
 *
 * Invariants:
 * - A step's ledger lease (set by the worker) must outlast one attempt's
 *   start-to-close timeout, or two live attempts could both hold the claim.
 * - The unknown-payment horizon must stay well inside the provider's 24 h
 *   idempotency-key window: past that window a retry under the same key could
 *   charge again, so the order goes to a human instead.
 */
import type { ActivityOptions, LocalActivityOptions } from '@temporalio/workflow';
import { FAILURE, type FailureType } from '../src/orders/contract.ts';
import { PROVIDER_KEY_WINDOW_MS } from '../src/providers/contract.ts';

export interface OrderTiming {
  /** One attempt of any step. */
  activityStartToCloseMs: number;
  /** Attempts of the charge before its outcome is declared unknown. */
  chargeMaxAttempts: number;
  /** Attempts of the receipt or a status write before the order needs attention. */
  stepMaxAttempts: number;
  retryInitialMs: number;
  retryMaxMs: number;
  /**
   * The charge and receipt activities heartbeat (each heartbeat renews their
   * ledger lease); a worker that dies mid-step is detected after this long,
   * not after the whole start-to-close timeout.
   */
  heartbeatTimeoutMs: number;
  /** First and largest pause between reconciliations while payment_unknown. */
  reconcileInitialMs: number;
  reconcileMaxMs: number;
  /** How long payment_unknown may last before the order needs attention. */
  unknownHorizonMs: number;
}

export const DEFAULT_TIMING: OrderTiming = {
  activityStartToCloseMs: 30_000,
  chargeMaxAttempts: 5,
  stepMaxAttempts: 10,
  retryInitialMs: 1_000,
  retryMaxMs: 30_000,
  heartbeatTimeoutMs: 5_000,
  // Reconciliation cadence: 5 s doubling to 60 s. An order in payment_unknown
  // is usually waiting for a provider to come back; the longest pause bounds
  // how long it waits after the provider does (a 2-minute outage must end
  // with every order complete within 2 minutes of the return: at most 60 s
  // to the next lookup, then the charge is performed again under its key).
  // The cost is one lookup per unknown order per minute, cheap for a
  // provider's read path. The first pauses are short because most outages
  // are blips.
  reconcileInitialMs: 5_000,
  reconcileMaxMs: 60_000,
  unknownHorizonMs: 6 * 60 * 60_000,
};

/**
 * Failures that prove the step's effect did not happen and retrying cannot
 * fix. Any other failure of an external step may hide an effect.
 */
const DEFINITE_FAILURE_TYPES: FailureType[] = [
  FAILURE.invalidInput,
  FAILURE.operationConflict,
  FAILURE.providerRejected,
  FAILURE.orderNotFound,
];

/** Failures of an external step that park the order for an operator instead of being retried. */
const PARKING_FAILURE_TYPES: FailureType[] = [...DEFINITE_FAILURE_TYPES, FAILURE.refusedAfterTakeover];

/** Whether a step's failure type (as the workflow received it) parks the order. */
export function parksOrder(type: string | undefined): boolean {
  return PARKING_FAILURE_TYPES.some((t) => t === type);
}

/** Errors that retrying cannot fix; paymentRejected is the provider refusing the charge request outright. */
const NON_RETRYABLE_ERROR_TYPES: FailureType[] = [...PARKING_FAILURE_TYPES, FAILURE.paymentRejected];

export function resolveTiming(overrides: Partial<OrderTiming> | undefined): OrderTiming {
  const timing = { ...DEFAULT_TIMING, ...overrides };
  // Never let a caller stretch reconciliation past the default provider key
  // window. This is only the workflow's patience: the window each adapter
  // declares (STRIPE_KEY_WINDOW_MS, the sandbox's) is enforced where it
  // matters, in the charge and refund steps (stepKeyWindowMs): past it a
  // "not found" never performs again, it parks the order (KEY_WINDOW_PASSED).
  timing.unknownHorizonMs = Math.min(timing.unknownHorizonMs, PROVIDER_KEY_WINDOW_MS / 2);
  return timing;
}

function retryPolicy(timing: OrderTiming, maximumAttempts: number) {
  return {
    initialInterval: timing.retryInitialMs,
    backoffCoefficient: 2,
    maximumInterval: timing.retryMaxMs,
    maximumAttempts,
    nonRetryableErrorTypes: NON_RETRYABLE_ERROR_TYPES,
  };
}

export function activityOptions(timing: OrderTiming, maximumAttempts: number): ActivityOptions {
  return {
    startToCloseTimeout: timing.activityStartToCloseMs,
    retry: retryPolicy(timing, maximumAttempts),
  };
}

/** Steps that call a provider as activities (the refund's): they heartbeat, and each heartbeat renews their lease. */
export function externalActivityOptions(timing: OrderTiming, maximumAttempts: number): ActivityOptions {
  return { ...activityOptions(timing, maximumAttempts), heartbeatTimeout: timing.heartbeatTimeoutMs };
}

/**
 * The order's steps (the charge, the receipt, status writes) run as local
 * activities in the workflow's own worker: no round trip through the server
 * per step. A local activity has no heartbeat timeout: a provider step's
 * ledger lease is renewed while its call runs (at a third of the lease), and
 * a dead worker is noticed through the workflow task's timeout. A status
 * write goes through the ledger's local mode, so when a worker crash makes a
 * replay run one again it replays the stored result instead of writing twice.
 */
export function localActivityOptions(timing: OrderTiming, maximumAttempts: number): LocalActivityOptions {
  return {
    startToCloseTimeout: timing.activityStartToCloseMs,
    retry: retryPolicy(timing, maximumAttempts),
    // Retries back off on a workflow timer (a marker for the failed attempt, a timer, a new task),
    // not inside the SDK core: its in-task retry leaves the failed attempt's start-to-close timer
    // running, which times the next attempt out early or, after the worker has shut down, panics
    // ("receive half not dropped"). docs/OPERATIONS.md (Logs); test/worker/local-retry-timers.test.ts.
    localRetryThreshold: 0,
  };
}
