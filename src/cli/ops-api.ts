/**
 * `ops <command> --api-url <url>`: the same commands through the admin API
 * (admin-api.ts). `--json` prints the API's answer (lists unwrapped from
 * `data`), which has the shape the database path prints, with times as ISO strings.
 */
import type { AuditEntry } from '../audit/sql.ts';
import { OpsError } from '../operator/errors.ts';
import { adminApi, operatorToken } from './admin-api.ts';
import type { ChosenCommand } from './ops-commands.ts';
import { attentionText, auditTable, refundRedriveText, resolvedText, table } from './ops-output.ts';

/** Runs the chosen command through the admin API; the exit status, as for the database path. */
export async function apiMain(
  { command, args: rest, values }: ChosenCommand,
  warn: (text: string) => void,
  out: (json: unknown, human: string) => void,
): Promise<number> {
  const api = adminApi(values.apiUrl!, operatorToken(values.tokenFile));
  const [tenant, type, key] = rest as [string, string, string];
  // The API takes its actor from the token; a claimed --actor would be silently ignored, so say so.
  if (values.actor) warn("--actor is ignored over --api-url: the audit log records the token's operator");
  if (command === 'recover-after-restore') {
    throw new OpsError(
      'invalid_input',
      'recover-after-restore runs while the API is stopped (or refusing creates), against the database and ' +
        'Temporal directly: run it without --api-url, with DATABASE_URL and TEMPORAL_ADDRESS set',
    );
  }
  switch (command) {
    case 'list': {
      const q = {
        type: values.type,
        tenant: values.tenant,
        keyPrefix: values.keyPrefix,
        olderThanSeconds: values.olderThan,
        limit: values.limit,
      };
      const page = async (state: string) =>
        ((await api.get('/admin/operations', { ...q, state })) as { data: Record<string, unknown>[] }).data;
      const items = values.state
        ? await page(values.state)
        : [...(await page('unknown')), ...(await page('in_progress'))];
      out(
        items,
        table(
          items.map((r) => ({
            ...r,
            age: `${String(r.ageSeconds)}s`,
            error: (r.error as { reason?: string } | null)?.reason,
          })),
          ['tenantId', 'operationType', 'key', 'state', 'age', 'attempts', 'providerRef', 'error'],
        ),
      );
      return 0;
    }
    case 'show': {
      const story = await api.get('/admin/operation', { tenant, type, key });
      out(story, JSON.stringify(story, null, 2));
      return 0;
    }
    case 'reconcile': {
      const r = (await api.post('/admin/operations/reconcile', {
        tenant,
        type,
        key,
        ...(values.reason ? { reason: values.reason } : {}),
      })) as { changed: boolean; before: string; after: string; auditId: string; error?: string | null };
      out(
        r,
        `${r.changed ? `${r.before} -> ${r.after}` : `${r.after}, unchanged`}; audit #${r.auditId}` +
          (r.error ? `\n${r.error}` : ''),
      );
      return r.error ? 1 : 0;
    }
    case 'resolve': {
      const ref = values.chargeId ?? values.providerRef;
      const r = (await api.post('/admin/operations/resolve', {
        tenant,
        type,
        key,
        outcome: values.outcome,
        reason: values.reason,
        ...(ref ? { providerRef: ref } : {}),
      })) as {
        before: string;
        after: string;
        auditId: string;
        workflowId: string | null;
        signalled: boolean;
        signalError?: string | null;
      };
      out(r, resolvedText(r.before, r.after, r.auditId, r));
      return 0;
    }
    case 'redrive': {
      const [, orderId] = rest as [string, string];
      const r = (await api.post(
        `/admin/orders/${encodeURIComponent(tenant)}/${encodeURIComponent(orderId)}/redrive`,
        { reason: values.reason },
      )) as {
        workflowId: string;
        auditId: string;
        parkedAs: { reason?: string; status?: string };
        temporalUiUrl: string;
      };
      out(
        r,
        `re-drive accepted by ${r.workflowId} (parked: ${r.parkedAs.reason ?? r.parkedAs.status}); ` +
          `audit #${r.auditId}\n${r.temporalUiUrl}`,
      );
      return 0;
    }
    case 'redrive-refund': {
      const [, refundId] = rest as [string, string];
      const r = (await api.post(
        `/admin/refunds/${encodeURIComponent(tenant)}/${encodeURIComponent(refundId)}/redrive`,
        { reason: values.reason },
      )) as {
        workflowId: string;
        auditId: string;
        parkedAs: { status: string; lastError: string | null };
        temporalUiUrl: string;
      };
      out(r, refundRedriveText(r.workflowId, r.parkedAs, r.auditId, r.temporalUiUrl));
      return 0;
    }
    case 'attention': {
      const r = (await api.get('/admin/attention', { tenant: values.tenant, limit: values.limit })) as {
        data: Record<string, unknown>[];
        refunds?: Record<string, unknown>[];
        visibilityError?: string | null;
      };
      if (r.visibilityError) warn(`${r.visibilityError}; listing order rows only`);
      const refunds = r.refunds ?? [];
      out([...r.data, ...refunds], attentionText(r.data, refunds));
      return 0;
    }
    case 'audit': {
      const r = (await api.get('/admin/audit', {
        key: values.key,
        tenant: values.tenant,
        workflowId: values.workflow,
        limit: values.limit,
      })) as { data: AuditEntry[] };
      out(r.data, auditTable(r.data));
      return 0;
    }
  }
  return 2;
}
