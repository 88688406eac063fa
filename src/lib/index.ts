/**
 * `onceflow`: the operation ledger (vocabulary: the Terminology block in
 * src/ledger/types.ts), its errors, and deterministic step keys. Activity
 * helpers are `onceflow/activity`, migrations `onceflow/migrations`, the
 * workflow-safe keys alone `onceflow/workflow`, the HTTP client `onceflow/client`.
 */
export * from '../ledger/index.ts';
export { stepKey } from './keys.ts';
export type { Pool, PoolClient, Queryable } from '../db/index.ts';
