/**
 * What an accepting request leaves with Temporal so that a restore of
 * onceflow's database can't turn a client's retry into a second order.
 *
 * A create (POST /v1/orders, POST /v1/orders/{id}/refunds) commits three
 * things in one transaction: the idempotency record of its key, the row, and
 * the start intent. If the database is restored to a backup older than that
 * commit, all three are gone, but Temporal still runs (or ran) the workflow.
 * The start intent carries this memo, the relay starts the workflow with it,
 * and `ops recover-after-restore` reads it back to rebuild the idempotency
 * record as it was: the same key, the same request (so the fingerprint, and a
 * 422 for a different body, hold), the same stored 202. A client that retries
 * with its original key then gets its original order, not a new workflow
 * with a new downstream key.
 *
 * Pure data: imported by the API (which writes it) and the recovery (which
 * reads it). The memo is visible in the Temporal UI next to the workflow's
 * input, which already holds the same customer fields.
 */
import type { Json, LedgerInput } from 'onceflow';

/** The memo field's name on order and refund workflows. */
const CREATE_MEMO_FIELD = 'onceflowCreate';
/**
 * The memo field naming the database whose start intent started the workflow
 * (its `database_identity`, migration 0026): a restore keeps it, another
 * database has another, so restore detection can tell a restored database's
 * lost rows from workflows of a different database on the same Temporal.
 */
const DATABASE_MEMO_FIELD = 'onceflowDatabase';

/** What identifies an idempotent request's content: its fingerprint is taken over all of it. */
export interface IdempotentRequest {
  /** Bump when the meaning of a field of the request changes. */
  schemaVersion: number;
  method: string;
  path: string;
  /** The validated, normalized body. */
  body: unknown;
}

/** The ledger input an idempotent request is fingerprinted by: one definition, for the API and the recovery. */
export function idempotentLedgerInput(request: IdempotentRequest): LedgerInput {
  const { schemaVersion, method, path, body } = request;
  return { schemaVersion, value: { method, path, body } };
}

/** The create record of one workflow, as its accepting request stored it. */
export interface CreateMemo {
  v: 1;
  /** The ledger's operation type of the create (http.create_order, http.create_refund). */
  operationType: string;
  /** The client's Idempotency-Key. */
  key: string;
  request: IdempotentRequest;
  /** The stored response, exactly what a replay returns. */
  response: Json;
  /** When the request committed (the record's and the row's created_at). */
  createdAt: string;
}

export function createMemo(memo: Omit<CreateMemo, 'v'>): Record<string, unknown> {
  const value: CreateMemo = { v: 1, ...memo };
  return { [CREATE_MEMO_FIELD]: value };
}

/** The create memo of a workflow, or null when it has none (started before 0.2.0, or not by the API). */
export function readCreateMemo(memo: Record<string, unknown> | undefined | null): CreateMemo | null {
  const m = memo?.[CREATE_MEMO_FIELD] as Partial<CreateMemo> | undefined;
  if (!m || m.v !== 1) return null;
  if (typeof m.key !== 'string' || typeof m.operationType !== 'string' || typeof m.createdAt !== 'string') {
    return null;
  }
  const r = m.request as Partial<IdempotentRequest> | undefined;
  if (
    !r ||
    typeof r.schemaVersion !== 'number' ||
    typeof r.method !== 'string' ||
    typeof r.path !== 'string'
  ) {
    return null;
  }
  if (m.response === undefined) return null;
  return m as CreateMemo;
}

/** The memo field that names the starting database. */
export function databaseMemo(identity: string): Record<string, unknown> {
  return { [DATABASE_MEMO_FIELD]: identity };
}

/** The database a workflow's memo names, or null (started before 0026's release, or not by the relay). */
export function readDatabaseIdentity(memo: Record<string, unknown> | undefined | null): string | null {
  const id = memo?.[DATABASE_MEMO_FIELD];
  return typeof id === 'string' && id !== '' ? id : null;
}
