/**
 * The ApplicationFailure types the activity helpers (activity.ts) give ledger
 * errors, so workflow code can tell them apart. Workflow-safe: no imports.
 */
export const LEDGER_FAILURE = {
  /** An external step's outcome was lost; the record is `unknown`. Retryable: the next attempt reconciles. */
  outcomeUnknown: 'OperationOutcomeUnknown',
  /** Another attempt holds the step's claim (or this one lost it); retried after its lease. */
  inProgress: 'OperationInProgress',
  /** The step's key was already used with a different input. Non-retryable. */
  conflict: 'OperationConflict',
  /** The ledger refused the step's key or input. Non-retryable. */
  invalidInput: 'InvalidInput',
  /** A local step stored a final business outcome (FinalFailure). Non-retryable: a retry replays it. */
  finalFailure: 'OperationFailed',
  /** Any other ledger error; retried. */
  ledgerError: 'LedgerError',
} as const;
