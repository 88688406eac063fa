/**
 * SQL for the append-only `audit_log` (a trigger refuses UPDATE/DELETE): who did what, and why.
 * Client first, so an audit row commits with the change it records.
 */
import type { Queryable } from '../db/index.ts';
import type { Json } from 'onceflow';

/** A re-drive is two rows: `redrive_requested` before Temporal is called, then its result. */
export type AuditAction =
  | 'reconcile'
  | 'resolve'
  | 'redrive'
  | 'redrive_requested'
  | 'redrive_refused'
  | 'redrive_unknown'
  /** A workflow's rows and records rebuilt after a database restore (src/restore/recover.ts, migrations/0021). */
  | 'restore'
  /** An operator sent a merchant event to an endpoint again (src/operator/webhook-routes.ts). */
  | 'webhook_redeliver';
export type AuditSource = 'cli' | 'api';
/**
 * How the actor was established: a named operator's token, the bootstrap admin token, or self-declared
 * (CLI).
 */
export type ActorCredential = 'operator_token' | 'admin_token' | 'self_declared';

/** What an action records: who, what, why, and the state before and after. */
export interface NewAuditEntry {
  actor: string;
  source: AuditSource;
  actorCredential: ActorCredential;
  action: AuditAction;
  reason: string | null;
  tenantId: string;
  operationType: string | null;
  operationKey: string | null;
  workflowId: string | null;
  /** Stored as jsonb (Dates become ISO strings); null or undefined stays SQL NULL. */
  before: unknown;
  after: unknown;
}

/** A stored audit row. */
export interface AuditEntry extends Omit<NewAuditEntry, 'before' | 'after'> {
  /** bigserial, as a string (it may exceed 2^53 in theory; it is also the operator's event ID). */
  id: string;
  createdAt: Date;
  before: Json | null;
  after: Json | null;
}

interface AuditRow {
  id: string;
  created_at: Date;
  actor: string;
  source: AuditSource;
  actor_credential: ActorCredential;
  action: AuditAction;
  reason: string | null;
  tenant_id: string;
  operation_type: string | null;
  operation_key: string | null;
  workflow_id: string | null;
  before: Json | null;
  after: Json | null;
}

const AUDIT_COLUMNS = `id::text as id, created_at, actor, source, actor_credential, action, reason, tenant_id,
  operation_type, operation_key, workflow_id, before, after`;

function toEntry(row: AuditRow): AuditEntry {
  return {
    id: row.id,
    createdAt: row.created_at,
    actor: row.actor,
    source: row.source,
    actorCredential: row.actor_credential,
    action: row.action,
    reason: row.reason,
    tenantId: row.tenant_id,
    operationType: row.operation_type,
    operationKey: row.operation_key,
    workflowId: row.workflow_id,
    before: row.before,
    after: row.after,
  };
}

/** JSON text for a jsonb parameter (Dates become ISO strings); null stays SQL NULL. */
function jsonParam(value: unknown): string | null {
  return value === null || value === undefined ? null : JSON.stringify(value);
}

export async function insertAudit(db: Queryable, e: NewAuditEntry): Promise<AuditEntry> {
  const { rows } = await db.query<AuditRow>(
    `insert into audit_log (actor, source, action, reason, tenant_id, operation_type, operation_key, workflow_id,
                            before, after, actor_credential)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10::jsonb, $11)
     returning ${AUDIT_COLUMNS}`,
    [
      e.actor,
      e.source,
      e.action,
      e.reason,
      e.tenantId,
      e.operationType,
      e.operationKey,
      e.workflowId,
      jsonParam(e.before),
      jsonParam(e.after),
      e.actorCredential,
    ],
  );
  const row = rows[0];
  if (!row) throw new Error('audit insert returned no row');
  return toEntry(row);
}

export interface AuditFilter {
  operationKey?: string;
  tenantId?: string;
  workflowId?: string;
  /** Exactly this actor (an operator's name, 'admin-token', or a CLI user). */
  actor?: string;
  action?: AuditAction;
  /** Text anywhere in the reason, operation key or workflow ID, case ignored. */
  text?: string;
  limit: number;
}

/** Newest first. */
export async function selectAudit(db: Queryable, f: AuditFilter): Promise<AuditEntry[]> {
  const { rows } = await db.query<AuditRow>(
    `select ${AUDIT_COLUMNS} from audit_log
      where ($1::text is null or operation_key = $1)
        and ($2::text is null or tenant_id = $2)
        and ($3::text is null or workflow_id = $3)
        and ($4::text is null or actor = $4)
        and ($5::text is null or action = $5)
        -- strpos, not LIKE: the operator's text is matched as typed, % and _ included.
        and ($6::text is null
             or strpos(lower(coalesce(reason, '')), lower($6)) > 0
             or strpos(lower(coalesce(operation_key, '')), lower($6)) > 0
             or strpos(lower(coalesce(workflow_id, '')), lower($6)) > 0)
      order by id desc
      limit $7`,
    [
      f.operationKey ?? null,
      f.tenantId ?? null,
      f.workflowId ?? null,
      f.actor ?? null,
      f.action ?? null,
      f.text ?? null,
      f.limit,
    ],
  );
  return rows.map(toEntry);
}
