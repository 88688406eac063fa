/**
 * onceflow: every step of a Temporal workflow done once, even when its
 * outcome is lost. Vocabulary: the Terminology block in types.ts.
 *
 * - In an activity: `externalStep` (a provider call, reconciled when its
 *   outcome is lost) and `localStep` (a write in this Postgres), each under
 *   the key `<workflowId>/<step name>`.
 * - The store: `Ledger` over your `pg.Pool`, its schema from `migrate`.
 * - In workflow code: `onceflow/workflow` (stepKey alone, deterministic).
 */
export { Ledger } from './ledger.ts';
export {
  externalStep,
  localStep,
  currentStepKey,
  toActivityFailure,
  heartbeatRenewal,
  type StepOptions,
  type ExternalStepOptions,
  type LocalStepOptions,
  type StepLogger,
} from './activity.ts';
export { stepKey } from './keys.ts';
export { migrate, type MigrateOptions } from './migrations.ts';
export { LedgerError, FinalFailure, isLedgerError } from './errors.ts';
export { LEDGER_FAILURE } from './failures.ts';
export { downstreamKey } from './canonical.ts';
export { withinKeyWindow } from './ledger.ts';
export { LocalStatement, type LocalStatementBody } from './local-statement.ts';
export type * from './types.ts';
export type { Pool, PoolClient, Queryable } from './db.ts';
