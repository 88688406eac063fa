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
import type { ActivityOptions } from '@temporalio/workflow';

export interface OrderTiming {
  /** One attempt of any step. */
  activityStartToCloseMs: number;
  /** Attempts of the charge before its outcome is declared unknown. */
  chargeMaxAttempts: number;
  /** Attempts of the receipt or a status write before the order needs attention. */
  stepMaxAttempts: number;
  retryInitialMs: number;
  retryMaxMs: number;
  /** First and largest pause between reconciliations while payment_unknown. */
  reconcileInitialMs: number;
  reconcileMaxMs: number;
  /** How long payment_unknown may last before the order needs attention. */
  unknownHorizonMs: number;
}

export const PROVIDER_KEY_WINDOW_MS = 24 * 60 * 60 * 1000;

export const DEFAULT_TIMING: OrderTiming = {
  activityStartToCloseMs: 30_000,
  chargeMaxAttempts: 5,
  stepMaxAttempts: 10,
  retryInitialMs: 1_000,
  retryMaxMs: 30_000,
  reconcileInitialMs: 30_000,
  reconcileMaxMs: 15 * 60_000,
  unknownHorizonMs: 6 * 60 * 60_000,
};

/**
 * Failures that prove the step's effect did not happen and retrying cannot
 * fix. Any other failure of an external step may hide an effect.
 */
export const DEFINITE_FAILURE_TYPES = [
  'InvalidInput',
  'OperationConflict',
  'ProviderRejected',
  'OrderNotFound',
];

/** Errors that retrying cannot fix; 'PaymentRejected' is the provider refusing the charge request outright. */
export const NON_RETRYABLE_ERROR_TYPES = [...DEFINITE_FAILURE_TYPES, 'PaymentRejected'];

export function resolveTiming(overrides: Partial<OrderTiming> | undefined): OrderTiming {
  const timing = { ...DEFAULT_TIMING, ...overrides };
  // Never let a caller stretch reconciliation past the provider's key window.
  timing.unknownHorizonMs = Math.min(timing.unknownHorizonMs, PROVIDER_KEY_WINDOW_MS / 2);
  return timing;
}

export function activityOptions(timing: OrderTiming, maximumAttempts: number): ActivityOptions {
  return {
    startToCloseTimeout: timing.activityStartToCloseMs,
    retry: {
      initialInterval: timing.retryInitialMs,
      backoffCoefficient: 2,
      maximumInterval: timing.retryMaxMs,
      maximumAttempts,
      nonRetryableErrorTypes: NON_RETRYABLE_ERROR_TYPES,
    },
  };
}
