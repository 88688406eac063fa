/**
 * `npm run ops -- <command>`: the operator's recovery path from a shell.
 * Every action keeps the original operation identity and writes an audit row
 * (who, what, why, before, after). See docs/OPERATIONS.md.
 *
 * The CLI runs with direct database access, so it cannot verify who runs it:
 * its audit rows carry --actor or the OS user with actor_credential
 * 'self_declared' (source 'cli'). `operator add|revoke|list` manage the named
 * credentials the admin API verifies instead.
 *
 * Exit status: 0 done; 1 refused or failed (not found, wrong state, a
 * dependency down); 2 bad usage. Errors go to stderr, results to stdout
 * (`--json` for machines, tables for people).
 *
 * This file runs a command against the database; ops-commands.ts is the
 * command line, ops-api.ts the same commands over --api-url, ops-output.ts
 * the tables.
 */
import { loadConfig } from '../config.ts';
// Not operator/index.ts: it brings the admin routes (Fastify), which a command line never serves.
import { Operator } from '../operator/operator.ts';
import { OpsError, isOpsError } from '../operator/errors.ts';
import { defaultActor } from '../operator/views.ts';
import { Recovery, otherDatabaseLine } from '../restore/recover.ts';
import {
  OPERATOR_NAME,
  generateOperatorToken,
  hashOperatorToken,
  insertOperator,
  listOperators,
  revokeOperator,
} from '../operator/accounts-sql.ts';
import { configureLogging } from '../log.ts';
import { runProcess } from '../process/run.ts';
import type { Resources } from '../process/resources.ts';
import { createLedger, openPool, openTemporalClient, configuredProviders } from '../process/wiring.ts';
import { errorJson } from './command.ts';
import { apiMain } from './ops-api.ts';
import { parseOpsCommandLine, type ChosenCommand, type Values } from './ops-commands.ts';
import {
  attentionText,
  auditTable,
  cell,
  reconcileLine,
  refundRedriveText,
  resolvedText,
  table,
} from './ops-output.ts';

async function main(
  { command, args: rest, values }: ChosenCommand,
  warn: (text: string) => void,
  resources: Resources,
): Promise<number> {
  const out = (json: unknown, human: string) =>
    process.stdout.write(`${values.json ? JSON.stringify(json, null, 2) : human}\n`);
  if (values.apiUrl !== undefined) return apiMain({ command, args: rest, values }, warn, out);
  const actor = values.actor ?? defaultActor();
  const config = loadConfig();
  // Log lines (a lost pool connection...) go to stderr: stdout is the command's output.
  configureLogging({ level: config.logLevel, pretty: config.logPretty, service: 'ops', stderrOnly: true });
  const pool = openPool(resources, config, { max: 2 });
  if (command.startsWith('operator ')) return operatorCommand(command, rest, pool, out);
  const operator = new Operator({
    pool,
    ledger: createLedger(pool, config),
    // Lazy: read-only commands never need Temporal, and only resolve/redrive signal.
    temporal: openTemporalClient(resources, config),
    ...configuredProviders(config),
    temporalUi: { url: config.temporal.uiUrl, namespace: config.temporal.namespace },
    source: 'cli',
  });
  if (command === 'recover-after-restore') return recoverCommand(values, config, pool, resources, actor, out);
  // commander checked the number of arguments; this only names them.
  const [tenantId, operationType, key] = rest as [string, string, string];

  switch (command) {
    case 'list': {
      const filter = {
        state: values.state || undefined,
        olderThanSeconds: values.olderThan,
        operationType: values.type || undefined,
        tenantId: values.tenant || undefined,
        keyPrefix: values.keyPrefix || undefined,
        limit: values.limit || undefined,
      };
      // Without --state, the default view is the work that needs someone: unknown, then in_progress.
      const items = values.state
        ? await operator.listOperations(filter)
        : [
            ...(await operator.listOperations({ ...filter, state: 'unknown' })),
            ...(await operator.listOperations({ ...filter, state: 'in_progress' })),
          ];
      const safe = items.map(({ ownerToken: _o, ...r }) => r);
      out(
        safe,
        table(
          items.map((r) => ({
            ...r,
            age: `${r.ageSeconds}s`,
            error: (r.error as { reason?: string } | null)?.reason,
          })),
          ['tenantId', 'operationType', 'key', 'state', 'age', 'attempts', 'providerRef', 'error'],
        ),
      );
      return 0;
    }
    case 'show': {
      const story = await operator.showOperation({ tenantId, operationType, key });
      const { ownerToken: _o, ...record } = story.record;
      const p = story.provider;
      out(
        { ...story, record },
        [
          `operation     ${record.tenantId} ${record.operationType} ${record.key}`,
          `state         ${record.state} (attempts ${record.attempts}, created ${record.createdAt.toISOString()}, updated ${record.updatedAt.toISOString()})`,
          `result        ${cell(record.result)}`,
          `error         ${cell(record.error)}`,
          `provider ref  ${cell(record.providerRef)}`,
          `downstream    ${cell(story.downstreamKey)}`,
          `provider view ${
            p.provider === null
              ? '- (local operation)'
              : p.error
                ? `${p.provider}: lookup failed: ${p.error}`
                : `${p.provider}: ${p.found ? cell(p.object) : 'nothing under this key'}`
          }`,
          `workflow      ${cell(story.workflowId)}`,
          `temporal ui   ${cell(story.temporalUiUrl)}`,
          `order         ${story.order ? `${story.order.status} (last error: ${cell(story.order.lastError)})` : '-'}`,
          '',
          'audit',
          auditTable(story.audit),
        ].join('\n'),
      );
      return 0;
    }
    case 'reconcile': {
      const r = await operator.reconcileNow(
        { tenantId, operationType, key },
        { actor, reason: values.reason || undefined },
      );
      out(
        {
          changed: r.changed,
          before: r.before.state,
          after: r.after.state,
          providerAnswer: r.providerAnswer,
          next: r.next ?? null,
          auditId: r.audit.id,
          error: r.error ?? null,
        },
        // A bare "unknown -> unknown" tells the operator nothing: say what the provider answered and what follows.
        reconcileLine(r) +
          `; audit #${r.audit.id}` +
          (r.next ? `\n${r.next}` : '') +
          (r.error ? `\n${r.error}` : ''),
      );
      // Audited either way, but an operator script must see that the provider did not answer.
      return r.error ? 1 : 0;
    }
    case 'resolve': {
      const ref = values.chargeId ?? values.providerRef;
      const r = await operator.resolveUnknown({ tenantId, operationType, key }, values.outcome!, {
        actor,
        reason: values.reason!,
        providerRef: ref || undefined,
      });
      out(
        {
          before: r.before.state,
          after: r.after.state,
          auditId: r.audit.id,
          workflowId: r.workflowId,
          signalled: r.signalled,
          signalError: r.signalError ?? null,
        },
        resolvedText(r.before.state, r.after.state, r.audit.id, r),
      );
      return 0;
    }
    case 'redrive': {
      const [, orderId] = rest as [string, string];
      const r = await operator.redrive(tenantId, orderId, { actor, reason: values.reason! });
      out(
        {
          workflowId: r.workflowId,
          auditId: r.audit.id,
          parkedAs: r.accepted,
          temporalUiUrl: operator.temporalUiUrl(r.workflowId),
        },
        `re-drive accepted by ${r.workflowId} (parked: ${r.accepted.reason ?? r.accepted.status}); ` +
          `audit #${r.audit.id}\n${operator.temporalUiUrl(r.workflowId)}`,
      );
      return 0;
    }
    case 'redrive-refund': {
      const [, refundId] = rest as [string, string];
      const r = await operator.redriveRefund(tenantId, refundId, { actor, reason: values.reason! });
      const url = operator.temporalUiUrl(r.workflowId);
      out(
        {
          workflowId: r.workflowId,
          refundId: r.refund.refundId,
          orderId: r.refund.orderId,
          status: r.refund.status,
          auditId: r.audit.id,
          parkedAs: r.accepted,
          temporalUiUrl: url,
        },
        refundRedriveText(r.workflowId, r.accepted, r.audit.id, url),
      );
      return 0;
    }
    case 'attention': {
      const { items, visibilityError } = await operator.listAttentionDetailed({
        tenantId: values.tenant || undefined,
        limit: values.limit || undefined,
      });
      // Parked workflows are found through Temporal visibility too; say so when it could not be read.
      if (visibilityError) warn(`${visibilityError}; listing order rows only`);
      // Refunds waiting on an outcome or a human follow the orders (JSON: items with kind 'refund').
      const refunds = await operator.listRefundAttention({
        tenantId: values.tenant || undefined,
        limit: values.limit || undefined,
      });
      out(
        [...items, ...refunds],
        attentionText(
          items as unknown as Record<string, unknown>[],
          refunds as unknown as Record<string, unknown>[],
        ),
      );
      return 0;
    }
    case 'audit': {
      const entries = await operator.auditLog({
        operationKey: values.key || undefined,
        tenantId: values.tenant || undefined,
        workflowId: values.workflow || undefined,
        limit: values.limit || undefined,
      });
      out(entries, auditTable(entries));
      return 0;
    }
  }
  return 2;
}

/**
 * recover-after-restore: progress to stderr as it goes, the summary to stdout.
 * Exit 1 when some workflow could not be rebuilt (the recovery stays pending,
 * creates keep answering 503, and a second run picks up where this one failed).
 */
async function recoverCommand(
  values: Values,
  config: ReturnType<typeof loadConfig>,
  pool: ReturnType<typeof openPool>,
  resources: Resources,
  actor: string,
  out: (json: unknown, human: string) => void,
): Promise<number> {
  const recovery = new Recovery({
    pool,
    ledger: createLedger(pool, config),
    temporal: openTemporalClient(resources, config),
    payments: configuredProviders(config).payments,
    taskQueue: config.temporal.taskQueue,
  });
  const summary = await recovery.run({
    since: values.since!,
    ...(values.marginSeconds !== undefined ? { marginMs: values.marginSeconds * 1000 } : {}),
    actor,
    // Progress, not warnings: plain lines on stderr (stdout is the summary).
    progress: (line) => process.stderr.write(`${line}\n`),
  });
  const s = summary;
  const other = otherDatabaseLine(s);
  out(
    summary,
    [
      `recovery ${s.recoveryId}: ${s.workflows.orders} order and ${s.workflows.refunds} refund workflows since ${s.listedFrom}`,
      ...(other ? [other] : []),
      `rows: ${s.rows.restored} restored, ${s.rows.broughtForward} brought forward, ${s.rows.unchanged} unchanged`,
      `create records: ${s.createRecords.restored} restored, ${s.createRecords.present} present, ` +
        `${s.createRecords.noMemo} without a memo (started before 0.2.0: a retry of those creates a new order)`,
      `merchant events: ${s.events.recorded} recorded (terminal statuses the restore lost)`,
      `merchant deliveries: ${s.deliveries.reopened} pending made due again (their runs may have ended after T0)`,
      `start intents: ${s.outbox.restored} restored`,
      `steps: ${s.steps.final} final, ${s.steps.unknown} unknown, ${s.steps.settledExisting} settled, ${s.steps.present} present`,
      `reconciled: ${s.reconciled.settled} settled, ${s.reconciled.stillUnknown} still unknown, ${s.reconciled.failed} failed`,
      s.errors.length === 0
        ? 'done: creates and workers may run again'
        : `NOT done: ${s.errors.length} workflows failed (the recovery stays pending; run again):\n` +
          s.errors.map((e) => `  ${e.workflowId}: ${e.error}`).join('\n'),
    ].join('\n'),
  );
  return s.errors.length === 0 ? 0 : 1;
}

async function operatorCommand(
  command: string,
  args: string[],
  pool: ReturnType<typeof openPool>,
  out: (json: unknown, human: string) => void,
): Promise<number> {
  const [name] = args as [string];
  switch (command) {
    case 'operator add': {
      if (!OPERATOR_NAME.test(name)) {
        throw new OpsError(
          'invalid_input',
          `operator name ${JSON.stringify(name)}: use 1-100 letters, digits, '.', '_', '@' or '-', starting with a letter or digit`,
        );
      }
      const token = generateOperatorToken();
      if (!(await insertOperator(pool, { name, tokenHash: hashOperatorToken(token) }))) {
        throw new OpsError(
          'invalid_state',
          `operator ${name} already exists (a name is never reused, so the audit log keeps meaning one person; ` +
            'revoke and add under a new name to replace a token)',
        );
      }
      out(
        { name, token },
        `operator ${name} added. Its token, shown only this once (only its hash is stored):\n\n${token}\n\n` +
          'Send it as `Authorization: Bearer <token>` to the /admin routes; the audit log records ' +
          `actor ${name}. Revoke it with: npm run ops -- operator revoke ${name}`,
      );
      return 0;
    }
    case 'operator revoke': {
      const r = await revokeOperator(pool, name);
      if (!r) throw new OpsError('not_found', `no operator ${name}`);
      out(
        { name, revoked: r.revoked, revokedAt: r.row.revokedAt },
        r.revoked
          ? `operator ${name} revoked; its token is refused from now on`
          : `operator ${name} was already revoked at ${r.row.revokedAt?.toISOString()}`,
      );
      return 0;
    }
    case 'operator list': {
      const rows = await listOperators(pool);
      out(
        rows.map((r) => ({ ...r, state: r.revokedAt ? 'revoked' : 'active' })),
        table(
          rows.map((r) => ({ ...r, state: r.revokedAt ? 'revoked' : 'active' })),
          ['name', 'state', 'createdAt', 'revokedAt'],
        ),
      );
      return 0;
    }
  }
  return 2;
}

const { chosen: picked, json: jsonOut } = parseOpsCommandLine();
const warn = (text: string) =>
  process.stderr.write(jsonOut ? `${JSON.stringify({ warning: text })}\n` : `warning: ${text}\n`);
await runProcess('ops', ({ resources }) => main(picked, warn, resources), {
  handleSignals: false,
  // Text: `error (<code>): <message>`; under --json one {"error": {code, message}} object. Exit 1.
  onError: (err) => {
    const code = isOpsError(err) ? err.code : 'failed';
    const message = err instanceof Error ? err.message : String(err);
    process.stderr.write(
      jsonOut
        ? errorJson(code, message)
        : isOpsError(err)
          ? `error (${code}): ${message}\n`
          : `error: ${message}\n`,
    );
    return 1;
  },
});
