/**
 * The ops CLI's output for people: tables and one-line summaries, the same
 * whether a command went to the database or through the admin API. (`--json`
 * prints the results themselves.)
 */
import type { AuditEntry } from '../audit/sql.ts';

/** What a resolve did, for people: the same line whether it went to the database or the admin API. */
export function resolvedText(
  before: string,
  after: string,
  auditId: number | string,
  r: { workflowId: string | null; signalled: boolean; signalError?: string | null },
): string {
  return (
    `${before} -> ${after}; audit #${auditId}` +
    (r.signalled ? `; workflow ${r.workflowId} signalled` : '') +
    (r.signalError
      ? `\nwarning: the ledger is settled but the workflow was not signalled: ${r.signalError}. ` +
        `If the order or refund is in needs_attention, re-drive it.`
      : '')
  );
}

/** One line for a reconcile: the change, or why nothing changed. */
export function reconcileLine(r: {
  changed: boolean;
  before: { state: string };
  after: { state: string };
  providerAnswer: string;
}): string {
  if (r.changed) return `${r.before.state} -> ${r.after.state}`;
  const state = r.after.state;
  if (r.providerAnswer !== 'skipped')
    return `${state}, unchanged (provider: ${r.providerAnswer.replace('_', ' ')})`;
  const why = state === 'succeeded' || state === 'failed' ? 'already settled' : 'a live attempt holds it';
  return `${state}, unchanged (${why}; provider not asked)`;
}

/** `attention`: the orders, then the refunds that follow them (if any). */
export function attentionText(orders: Record<string, unknown>[], refunds: Record<string, unknown>[]): string {
  const columns = [
    'tenantId',
    'orderId',
    'status',
    'reason',
    'source',
    'updatedAt',
    'lastError',
    'temporalUiUrl',
  ];
  return table(orders, columns) + refundTable(refunds);
}

/** The refunds that follow the orders in `attention` (none: nothing). */
function refundTable(refunds: Record<string, unknown>[]): string {
  if (refunds.length === 0) return '';
  return `\n\nRefunds:\n${table(refunds, [
    'tenantId',
    'orderId',
    'refundId',
    'status',
    'amount',
    'updatedAt',
    'lastError',
    'operationKey',
    'temporalUiUrl',
  ])}`;
}

export function refundRedriveText(
  workflowId: string,
  parkedAs: { status: string; lastError: string | null },
  auditId: string,
  url: string,
): string {
  return (
    `re-drive accepted by ${workflowId} (parked: ${parkedAs.status}` +
    `${parkedAs.lastError ? `, ${parkedAs.lastError}` : ''}); audit #${auditId}\n${url}`
  );
}

export function cell(v: unknown): string {
  if (v === null || v === undefined) return '-';
  if (v instanceof Date) return v.toISOString();
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

export function table(rows: Record<string, unknown>[], columns: string[]): string {
  if (rows.length === 0) return '(none)';
  const cells = rows.map((r) => columns.map((c) => cell(r[c]).replace(/\s+/g, ' ')));
  const widths = columns.map((c, i) => Math.min(80, Math.max(c.length, ...cells.map((r) => r[i]!.length))));
  const fmt = (r: string[]) =>
    r
      .map((v, i) => (v.length > widths[i]! ? `${v.slice(0, widths[i]! - 1)}…` : v.padEnd(widths[i]!)))
      .join('  ');
  return [fmt(columns), fmt(widths.map((w) => '-'.repeat(w))), ...cells.map(fmt)].join('\n');
}

const CREDENTIAL_LABELS: Record<AuditEntry['actorCredential'], string> = {
  operator_token: 'operator token',
  admin_token: 'shared admin token',
  self_declared: 'self-declared',
};

export function auditTable(entries: AuditEntry[]): string {
  return table(
    entries.map((e) => ({
      id: e.id,
      at: e.createdAt,
      actor: `${e.actor} (${e.source}, ${CREDENTIAL_LABELS[e.actorCredential]})`,
      action: e.action,
      target: e.operationKey
        ? `${e.tenantId} ${e.operationType} ${e.operationKey}`
        : `${e.tenantId} ${e.workflowId}`,
      before:
        (e.before as { state?: string; status?: string } | null)?.state ??
        (e.before as { status?: string } | null)?.status,
      after:
        (e.after as { state?: string; status?: string } | null)?.state ??
        (e.after as { status?: string } | null)?.status,
      reason: e.reason,
    })),
    ['id', 'at', 'actor', 'action', 'target', 'before', 'after', 'reason'],
  );
}
