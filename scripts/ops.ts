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
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import { loadConfig } from '../src/config.ts';
import type { OperationState } from 'onceflow';
import {
  Operator,
  OpsError,
  Recovery,
  defaultActor,
  isOpsError,
  otherDatabaseLine,
  type AuditEntry,
} from '../src/operator/index.ts';
import {
  OPERATOR_NAME,
  generateOperatorToken,
  hashOperatorToken,
  insertOperator,
  listOperators,
  revokeOperator,
} from '../src/operator/accounts-sql.ts';
import { configureLogging } from '../src/log.ts';
import { runProcess } from '../src/process/run.ts';
import type { Resources } from '../src/process/resources.ts';
import { createLedger, openPool, openTemporalClient, configuredProviders } from '../src/process/wiring.ts';
import { createCommand, errorJson, parseCli } from './lib/cli.ts';
import { adminApi, operatorToken } from './lib/admin-api.ts';

const STATES = ['in_progress', 'unknown', 'succeeded', 'failed'] as const;

/** Every option any command takes; each command declares only its own (see `program` below). */
interface Values {
  state?: OperationState;
  olderThan?: number;
  type?: string;
  tenant?: string;
  keyPrefix?: string;
  key?: string;
  workflow?: string;
  limit?: number;
  reason?: string;
  outcome?: 'succeeded' | 'failed';
  chargeId?: string;
  providerRef?: string;
  actor?: string;
  json?: boolean;
  apiUrl?: string;
  tokenFile?: string;
  since?: Date;
  marginSeconds?: number;
}

/** What a resolve did, for people: the same line whether it went to the database or the admin API. */
function resolvedText(
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

function nonNegative(raw: string): number {
  const n = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(n) || n < 0)
    throw new InvalidArgumentError('must be a non-negative number');
  return n;
}

function limit(raw: string): number {
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || n < 1 || n > 1000)
    throw new InvalidArgumentError('must be an integer from 1 to 1000');
  return n;
}

function reasonText(raw: string): string {
  if (raw.trim() === '')
    throw new InvalidArgumentError('must not be blank: say why, it goes into the audit log');
  return raw;
}

function instant(raw: string): Date {
  const d = new Date(raw);
  if (!/^\d{4}-\d{2}-\d{2}T/.test(raw) || Number.isNaN(d.getTime()))
    throw new InvalidArgumentError('must be an ISO-8601 time with a zone, e.g. 2026-12-02T14:00:00Z');
  if (d.getTime() > Date.now())
    throw new InvalidArgumentError('is in the future: give the time the backup was taken');
  return d;
}

function actorName(raw: string): string {
  if (raw.trim() === '') throw new InvalidArgumentError('must not be empty');
  return raw;
}

// ------------------------------------------------------------------ command line

/** What the command line asked for, filled in by the chosen command's action. */
let chosen: { command: string; args: string[]; values: Values } | undefined;

const program = createCommand(
  'ops',
  "The operator's recovery path: every action keeps the operation's identity and writes an audit row.",
)
  .usage('<command> [options]   (npm run ops -- <command> [options])')
  .addHelpText(
    'after',
    '\nExit status: 0 done; 1 refused or failed (not found, wrong state, a dependency down); 2 bad usage.\n' +
      "Run `npm run ops -- <command> --help` for a command's options. See docs/OPERATIONS.md.",
  );

function command(
  name: string,
  description: string,
  opts: { actor?: boolean; parent?: Command } = {},
): Command {
  const cmd = (opts.parent ?? program)
    .command(name)
    .description(description)
    .helpOption('-h, --help', 'show this help')
    .option('--json', 'machine-readable output: every output, errors included, is JSON');
  if (opts.actor)
    cmd.option(
      '--actor <name>',
      'who acts, recorded in the audit log (default: the OS user; over --api-url the token names the actor)',
      actorName,
    );
  // Operator management writes the credentials the API checks, so it stays database-only.
  if (!opts.parent)
    cmd
      .option('--api-url <url>', 'act through the admin API at this URL instead of the database')
      .option(
        '--token-file <path>',
        'with --api-url: a file holding the operator token (default: $ONCEFLOW_OPERATOR_TOKEN)',
      );
  return cmd.action((...received: unknown[]) => {
    // commander passes the declared arguments, then the options object, then the command.
    const self = received.at(-1) as Command;
    chosen = {
      command: opts.parent ? `${opts.parent.name()} ${name}` : name,
      args: received.slice(0, -2) as string[],
      values: self.opts<Values>(),
    };
  });
}

command('list', 'Operations by state and age (default: unknown and in_progress)')
  .addOption(new Option('--state <state>', 'only this state').choices(STATES))
  .option('--older-than <seconds>', 'only operations older than this', nonNegative)
  .option('--type <type>', 'operation type, e.g. payment.charge')
  .option('--tenant <id>', 'tenant ID')
  .option('--key-prefix <prefix>', 'operation keys starting with this')
  .option('--limit <n>', 'at most n rows (1 to 1000)', limit);

command('show', "The whole story: record, provider's view, workflow, Temporal UI link, audit")
  .argument('<tenant>', 'tenant ID')
  .argument('<type>', 'operation type, e.g. payment.charge')
  .argument('<key>', 'operation key, e.g. order/acme/ord_1/charge');

command('reconcile', 'Ask the provider now, by the downstream key, and store its answer', { actor: true })
  .argument('<tenant>', 'tenant ID')
  .argument('<type>', 'operation type')
  .argument('<key>', 'operation key')
  .option('--reason <text>', 'why, recorded in the audit log', reasonText);

command(
  'resolve',
  'Settle an unknown outcome by hand (reason required); signals the order or refund workflow',
  { actor: true },
)
  .argument('<tenant>', 'tenant ID')
  .argument('<type>', 'operation type')
  .argument('<key>', 'operation key')
  .addOption(
    new Option('--outcome <outcome>', 'what happened at the provider')
      .choices(['succeeded', 'failed'])
      .makeOptionMandatory(),
  )
  .requiredOption('--reason <text>', 'why (required), recorded in the audit log', reasonText)
  .option('--charge-id <id>', "the provider's charge ID, if known")
  .option('--provider-ref <id>', "the provider's object ID (charge, refund or message), if known");

command('redrive', 'Re-drive an order in needs_attention (reason required)', { actor: true })
  .argument('<tenant>', 'tenant ID')
  .argument('<orderId>', 'order ID')
  .requiredOption('--reason <text>', 'why (required), recorded in the audit log', reasonText);

command('redrive-refund', 'Re-drive a refund in needs_attention (reason required)', { actor: true })
  .argument('<tenant>', 'tenant ID')
  .argument('<refundId>', 'refund ID')
  .requiredOption('--reason <text>', 'why (required), recorded in the audit log', reasonText);

command('attention', 'Orders in needs_attention, and refunds in refund_unknown or needs_attention')
  .option('--tenant <id>', 'tenant ID')
  .option('--limit <n>', 'at most n rows (1 to 1000)', limit);

command('audit', 'The audit log, newest first')
  .option('--key <key>', 'operation key')
  .option('--tenant <id>', 'tenant ID')
  .option('--workflow <id>', 'workflow ID')
  .option('--limit <n>', 'at most n rows (1 to 1000)', limit);

command(
  'recover-after-restore',
  'After restoring the database from a backup taken at --since: rebuild the orders, refunds, create ' +
    'records and step records it lost, from Temporal and the providers (creates answer 503 meanwhile)',
  { actor: true },
)
  .requiredOption(
    '--since <time>',
    'when the restored backup was taken (ISO-8601, e.g. 2026-12-02T14:00:00Z)',
    instant,
  )
  .option(
    '--margin-seconds <n>',
    'also rebuild workflows this long before --since (default 300)',
    nonNegative,
  );

const operators = program
  .command('operator')
  .description(
    "Named admin credentials: each operator's token, whose name the admin API records as the actor",
  )
  .helpOption('-h, --help', 'show this help');

command('add', 'Create an operator and print its token once (only its hash is stored)', {
  parent: operators,
}).argument('<name>', 'who the token belongs to, e.g. alice (letters, digits, . _ @ -)');

command('revoke', "Revoke an operator's token; the admin API refuses it from the next request on", {
  parent: operators,
}).argument('<name>', 'operator name');

command('list', 'Operators and whether their token is active (never the tokens)', { parent: operators });

/** One line for a reconcile: the change, or why nothing changed. */
function reconcileLine(r: {
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

// ------------------------------------------------------------------ output

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

function refundRedriveText(
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

function cell(v: unknown): string {
  if (v === null || v === undefined) return '-';
  if (v instanceof Date) return v.toISOString();
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

function table(rows: Record<string, unknown>[], columns: string[]): string {
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

function auditTable(entries: AuditEntry[]): string {
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

// ------------------------------------------------------------------ main

async function main(
  { command, args: rest, values }: NonNullable<typeof chosen>,
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
      const orders = table(items as unknown as Record<string, unknown>[], [
        'tenantId',
        'orderId',
        'status',
        'reason',
        'source',
        'updatedAt',
        'lastError',
        'temporalUiUrl',
      ]);
      out([...items, ...refunds], `${orders}${refundTable(refunds as unknown as Record<string, unknown>[])}`);
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
 * The same commands through the admin API (scripts/lib/admin-api.ts). `--json`
 * prints the API's answer (lists unwrapped from `data`), which has the shape
 * the database path prints, with times as ISO strings.
 */
async function apiMain(
  { command, args: rest, values }: NonNullable<typeof chosen>,
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
      out(
        [...r.data, ...refunds],
        table(r.data, [
          'tenantId',
          'orderId',
          'status',
          'reason',
          'source',
          'updatedAt',
          'lastError',
          'temporalUiUrl',
        ]) + refundTable(refunds),
      );
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

const cli = parseCli(program);
if (!chosen) throw new Error('ops: no command was chosen'); // commander refuses that as a usage error first
const jsonOut = cli.json;
const picked = chosen;
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
