/**
 * Terminology
 *
 * - **Operation**: one logical intent (charge this order, send this receipt,
 *   move this order to `paid`). Retries of the same intent are the same
 *   operation.
 * - **Scope**: (tenant, operation type, key), the identity of an operation and
 *   the primary key of its record. The tenant comes from credentials, never
 *   from a request field; two tenants never share an operation.
 * - **Key**: the caller-chosen name of the intent (an `Idempotency-Key` header,
 *   or `<workflowId>/charge`). 1..255 visible ASCII characters.
 * - **Fingerprint**: SHA-256 over canonical JSON of (operation type, schema
 *   version, validated input). Same scope + different fingerprint is a
 *   **conflict**, never a replay.
 * - **Record**: the row in `operations` that remembers an operation.
 * - **Claim**: taking an operation for one attempt. A claim carries an
 *   **owner token** (the fencing token) and, in external mode, a **lease**.
 *   Only the current owner may complete the claim.
 * - **Completion**: storing the final outcome, `succeeded` or `failed` (a
 *   final business outcome such as a declined card). Completed records are
 *   **replayed**: later calls get the stored result without running anything.
 * - **Unknown**: an external call whose outcome was lost. It is never presumed
 *   failed; it must be **reconciled**: ask the provider what happened under the
 *   **downstream key** (the stable idempotency key we send the provider,
 *   derived from the scope, the same for every attempt).
 * - **Takeover**: claiming a record whose lease expired, or that is `unknown`.
 *   A takeover always reconciles before it performs anything.
 * - **Settle**: completing an `unknown` record from outside the attempt that
 *   lost it (a provider webhook, an operator).
 * - **Local mode**: the effect is a write in this Postgres; the business write
 *   and the completion commit in one transaction.
 * - **External mode**: the effect happens at a provider; claim, perform with
 *   the downstream key, then complete / mark unknown, all fenced.
 * - **Reaper**: deletes completed records older than the retention window.
 *   Never deletes `in_progress` or `unknown` records.
 */

import type pg from 'pg';

export interface Scope {
  tenantId: string;
  operationType: string;
  key: string;
}

export type OperationState = 'in_progress' | 'succeeded' | 'failed' | 'unknown';

/** Final states: stored outcomes that are replayed and may be reaped. */
export type FinalState = 'succeeded' | 'failed';

export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

export interface OperationRecord {
  tenantId: string;
  operationType: string;
  key: string;
  fingerprint: string;
  schemaVersion: number;
  state: OperationState;
  /** Fencing token of the current claim; null when nobody owns the record. */
  ownerToken: string | null;
  /** When the current claim may be taken over (database clock); null when unowned. */
  leaseExpiresAt: Date | null;
  /** How many times the operation was claimed: 1 for the first claim, +1 per takeover. */
  attempts: number;
  /** The idempotency key sent to the provider (external mode); null in local mode. */
  downstreamKey: string | null;
  providerRef: string | null;
  /** The stored outcome (for `failed`, the failure body). */
  result: Json | null;
  /** Why the outcome became unknown (latest reason); kept after settlement for audit. */
  error: Json | null;
  createdAt: Date;
  updatedAt: Date;
  completedAt: Date | null;
}

export type LedgerErrorCode =
  | 'conflict'
  | 'in_progress'
  | 'ownership_lost'
  | 'invalid_key'
  | 'invalid_input'
  | 'outcome_unknown'
  | 'not_found'
  | 'invalid_state';

export type LedgerEventType =
  | 'claim'
  | 'replay'
  | 'conflict'
  | 'in_progress'
  | 'takeover'
  | 'unknown'
  | 'reconcile'
  | 'ownership_lost'
  | 'complete'
  | 'fail';

/**
 * `outcome` by type: claim `local`|`external`; replay and complete
 * `succeeded`|`failed`; reconcile the reconcile answer (`succeeded`, `failed`,
 * `not_found`, `pending`, `error`) or `settled:<state>`; unknown
 * `perform_error`|`reconcile_pending`|`reconcile_not_found`|`reconcile_error`|
 * `key_window_passed`; fail `rolled_back`|`released`; ownership_lost
 * `renewal` when a lease renewal was refused (otherwise no outcome).
 */
export type LedgerEvent = { type: LedgerEventType; operationType: string; outcome?: string };

export interface LedgerHooks {
  /** Called synchronously; a throwing hook is ignored, never breaks an operation. */
  onEvent?(event: LedgerEvent): void;
}

export interface LedgerOptions {
  hooks?: LedgerHooks;
  /** External-mode lease, renewed every third of it while the attempt runs. Default 15 000. */
  leaseMs?: number;
  /** Local mode: how long a concurrent duplicate waits for the first attempt. Default 5 000. */
  localWaitMs?: number;
}

export interface LedgerInput {
  /** Version of the input's schema; bump it when the meaning of a field changes. */
  schemaVersion: number;
  /** The validated input; this is what is fingerprinted. */
  value: unknown;
}

export type ExternalOutcome<T extends Json> = { state: FinalState; result: T; providerRef?: string };

export type ReconcileOutcome<T extends Json> =
  ExternalOutcome<T> | { state: 'not_found' } | { state: 'pending' };

export interface ReconcileContext {
  downstreamKey: string;
  record: OperationRecord;
}

export interface PerformContext {
  downstreamKey: string;
  /** `record.attempts` of the claim this perform runs under. */
  attempt: number;
  ownerToken: string;
}

export interface ExternalHandlers<T extends Json> {
  perform(ctx: PerformContext): Promise<ExternalOutcome<T>>;
  reconcile(ctx: ReconcileContext): Promise<ReconcileOutcome<T>>;
}

/** Per-call options of runLocal. */
export interface LocalRunOptions {
  /**
   * Statements sent in the same write as `BEGIN` and the claim, before the claim's outcome is known
   * (rolled back if it finds a record): plain, independent reads or writes with no effect outside
   * the transaction. Their results are `fn`'s second argument; the first error is the body's.
   */
  first?: readonly pg.QueryConfig[];
  /**
   * Read the stored result by primary key before opening the transaction (default false). A replay
   * then costs one statement instead of four, and a first run one more. For a caller that is
   * likely a replay, such as a retried activity. Only the cost differs.
   */
  readFirst?: boolean;
}

/** Per-call options of runExternal. */
export interface ExternalRunOptions {
  /** This attempt's lease; default the ledger's `leaseMs`. */
  leaseMs?: number;
  /**
   * The provider's idempotency-key window. After a `not_found` reconcile, perform again only inside
   * it (minus a margin): a provider that forgot the key would act twice. Default 24 h.
   */
  keyWindowMs?: number;
  /** Called on every renewal tick (an activity passes its Temporal heartbeat); a throwing hook is ignored. */
  heartbeat?: () => void;
  /** How often to heartbeat and renew the lease; default and at most a third of it. */
  renewEveryMs?: number;
}

/** What reconcileUnresolved did. */
export interface ReconcileUnresolvedResult {
  /** The record afterwards. */
  record: OperationRecord;
  /** `skipped`: nothing asked (the record is final, or a live attempt holds it). */
  answer: 'settled' | 'pending' | 'not_found' | 'skipped';
  /**
   * `not_found` inside the key window: the next runExternal performs under the same key. Outside it, a
   * human decides.
   */
  performable: boolean;
}

export interface ExternalRunResult<T extends Json> {
  state: FinalState;
  result: T;
  /** True when the outcome was already stored and nothing was called. */
  replayed: boolean;
  /** True when the outcome came from reconcile (a takeover found it at the provider). */
  reconciled: boolean;
  providerRef: string | null;
}

export type ClaimResult =
  | { kind: 'claimed'; ownerToken: string; takeover: boolean; record: OperationRecord }
  | { kind: 'replay'; record: OperationRecord };

export interface ListFilter {
  state?: OperationState;
  operationType?: string;
  tenantId?: string;
  keyPrefix?: string;
  /** Only records created more than this long ago. */
  olderThanMs?: number;
  /** Default 100, at most MAX_LIST_LIMIT (1000); a larger limit is capped. */
  limit?: number;
}

export interface ReapOptions {
  /** Retention window: completed records whose `completed_at` is older than this are deleted. */
  olderThanMs: number;
  /** Rows per DELETE statement (default 1000). */
  batchSize?: number;
  /** Upper bound on statements per call (default 100). */
  maxBatches?: number;
}

export interface ReapResult {
  deleted: number;
  batches: number;
  byState: { succeeded: number; failed: number };
}
