/**
 * `npm run ops -- <command>`: the operator's recovery path from a shell.
 * Every action keeps the original operation identity and writes an audit row
 * (who, what, why, before, after). See docs/OPERATIONS.md.
 *
 * Exit status: 0 done; 1 refused or failed (not found, wrong state, a
 * dependency down); 2 bad usage. Errors go to stderr, results to stdout
 * (`--json` for machines, tables for people).
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { loadConfig } from '../src/config.ts';
import type { OperationState } from '../src/ledger/index.ts';
import { Operator, defaultActor, isOpsError, type AuditEntry } from '../src/ops/index.ts';
import { configureLogging } from '../src/log.ts';
import { runProcess } from '../src/process/run.ts';
import type { Resources } from '../src/process/resources.ts';
import { createLedger, openPool, openTemporalClient, sandboxProviders } from '../src/process/wiring.ts';

const USAGE = `Usage: npm run ops -- <command> [options]

Commands
  list [--state S] [--older-than SECONDS] [--type T] [--tenant ID] [--key-prefix P] [--limit N]
                                 Operations by state and age (default: unknown and in_progress)
  show <tenant> <type> <key>     The whole story: record, provider's view, workflow, Temporal UI link, audit
  reconcile <tenant> <type> <key> [--reason TEXT]
                                 Ask the provider now, by the downstream key, and store its answer
  resolve <tenant> <type> <key> --outcome succeeded|failed --reason TEXT [--charge-id ID]
                                 Settle an unknown outcome by hand (reason required); signals the order
  redrive <tenant> <orderId> --reason TEXT
                                 Re-drive an order in needs_attention (reason required)
  attention [--tenant ID] [--limit N]
                                 Orders in needs_attention, with their last error
  audit [--key K] [--tenant ID] [--workflow ID] [--limit N]
                                 The audit log, newest first

Common options
  --actor NAME   who acts (default: the OS user)     --json   machine-readable output
`;

const STATES = ['in_progress', 'unknown', 'succeeded', 'failed'] as const;

class UsageError extends Error {}

const options = {
  state: { type: 'string' },
  'older-than': { type: 'string' },
  type: { type: 'string' },
  tenant: { type: 'string' },
  'key-prefix': { type: 'string' },
  key: { type: 'string' },
  workflow: { type: 'string' },
  limit: { type: 'string' },
  reason: { type: 'string' },
  outcome: { type: 'string' },
  'charge-id': { type: 'string' },
  'provider-ref': { type: 'string' },
  actor: { type: 'string' },
  json: { type: 'boolean', default: false },
  help: { type: 'boolean', short: 'h', default: false },
} satisfies ParseArgsConfig['options'];

type Values = ReturnType<typeof parseArgs<{ options: typeof options; allowPositionals: true }>>['values'];

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

function parse(argv: string[]) {
  try {
    return parseArgs({ args: argv, options, allowPositionals: true, strict: true });
  } catch (err) {
    throw new UsageError(err instanceof Error ? err.message : String(err));
  }
}

function positionals(args: string[], names: string[], command: string): string[] {
  if (args.length !== names.length) {
    throw new UsageError(
      `${command} takes ${names.map((n) => `<${n}>`).join(' ')}, got ${args.length} argument(s)`,
    );
  }
  return args;
}

function nonNegative(raw: string | undefined, flag: string): number | undefined {
  if (raw === undefined) return undefined;
  const n = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(n) || n < 0)
    throw new UsageError(`${flag} must be a non-negative number`);
  return n;
}

function limit(raw: string | undefined): number | undefined {
  const n = nonNegative(raw, '--limit');
  if (n !== undefined && (!Number.isInteger(n) || n < 1 || n > 1000)) {
    throw new UsageError('--limit must be an integer from 1 to 1000');
  }
  return n;
}

function requireReason(values: Values): string {
  if (values.reason === undefined || values.reason.trim() === '') {
    throw new UsageError('--reason "..." is required: say why, it goes into the audit log');
  }
  return values.reason;
}

// ------------------------------------------------------------------ output

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

function auditTable(entries: AuditEntry[]): string {
  return table(
    entries.map((e) => ({
      id: e.id,
      at: e.createdAt,
      actor: `${e.actor} (${e.source})`,
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

async function main(argv: string[], resources: Resources): Promise<number> {
  const { values, positionals: args } = parse(argv);
  const [command, ...rest] = args;
  if (values.help || !command) {
    process.stdout.write(USAGE);
    return command || values.help ? 0 : 2;
  }
  const known = ['list', 'show', 'reconcile', 'resolve', 'redrive', 'attention', 'audit'];
  if (!known.includes(command)) throw new UsageError(`unknown command ${JSON.stringify(command)}`);

  // Validate everything that needs no I/O before connecting anywhere.
  const actor = values.actor ?? defaultActor();
  if (actor.trim() === '') throw new UsageError('--actor must not be empty');
  if (values.state !== undefined && !(STATES as readonly string[]).includes(values.state)) {
    throw new UsageError(`--state must be one of ${STATES.join(', ')}`);
  }
  if (command === 'resolve') {
    if (values.outcome !== 'succeeded' && values.outcome !== 'failed') {
      throw new UsageError('--outcome succeeded|failed is required');
    }
    requireReason(values);
  }
  if (command === 'redrive') requireReason(values);

  const config = loadConfig();
  // Log lines (a lost pool connection...) go to stderr: stdout is the command's output.
  configureLogging({ level: config.logLevel, pretty: config.logPretty, service: 'ops', stderrOnly: true });
  const pool = openPool(resources, config, { max: 2 });
  const operator = new Operator({
    pool,
    ledger: createLedger(pool, config),
    // Lazy: read-only commands never need Temporal, and only resolve/redrive signal.
    temporal: openTemporalClient(resources, config),
    ...sandboxProviders(config),
    temporalUi: { url: config.temporal.uiUrl, namespace: config.temporal.namespace },
    source: 'cli',
  });
  const out = (json: unknown, human: string) =>
    process.stdout.write(`${values.json ? JSON.stringify(json, null, 2) : human}\n`);

  switch (command) {
    case 'list': {
      const filter = {
        ...(values.state ? { state: values.state as OperationState } : {}),
        ...(values['older-than'] !== undefined
          ? { olderThanSeconds: nonNegative(values['older-than'], '--older-than')! }
          : {}),
        ...(values.type ? { operationType: values.type } : {}),
        ...(values.tenant ? { tenantId: values.tenant } : {}),
        ...(values['key-prefix'] ? { keyPrefix: values['key-prefix'] } : {}),
        ...(values.limit ? { limit: limit(values.limit)! } : {}),
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
      const [tenantId, operationType, key] = positionals(rest, ['tenant', 'type', 'key'], 'show');
      const story = await operator.showOperation({
        tenantId: tenantId!,
        operationType: operationType!,
        key: key!,
      });
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
      const [tenantId, operationType, key] = positionals(rest, ['tenant', 'type', 'key'], 'reconcile');
      const r = await operator.reconcileNow(
        { tenantId: tenantId!, operationType: operationType!, key: key! },
        { actor, ...(values.reason ? { reason: values.reason } : {}) },
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
      const [tenantId, operationType, key] = positionals(rest, ['tenant', 'type', 'key'], 'resolve');
      const ref = values['charge-id'] ?? values['provider-ref'];
      const r = await operator.resolveUnknown(
        { tenantId: tenantId!, operationType: operationType!, key: key! },
        values.outcome as 'succeeded' | 'failed',
        { actor, reason: requireReason(values), ...(ref ? { providerRef: ref } : {}) },
      );
      out(
        {
          before: r.before.state,
          after: r.after.state,
          auditId: r.audit.id,
          workflowId: r.workflowId,
          signalled: r.signalled,
          signalError: r.signalError ?? null,
        },
        `${r.before.state} -> ${r.after.state}; audit #${r.audit.id}` +
          (r.signalled ? `; workflow ${r.workflowId} signalled` : '') +
          (r.signalError
            ? `\nwarning: the ledger is settled but the workflow was not signalled: ${r.signalError}. ` +
              `If the order is in needs_attention, re-drive it.`
            : ''),
      );
      return 0;
    }
    case 'redrive': {
      const [tenantId, orderId] = positionals(rest, ['tenant', 'orderId'], 'redrive');
      const r = await operator.redrive(tenantId!, orderId!, { actor, reason: requireReason(values) });
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
    case 'attention': {
      positionals(rest, [], 'attention');
      const { items, visibilityError } = await operator.listAttentionDetailed({
        ...(values.tenant ? { tenantId: values.tenant } : {}),
        ...(values.limit ? { limit: limit(values.limit)! } : {}),
      });
      // Parked workflows are found through Temporal visibility too; say so when it could not be read.
      if (visibilityError) process.stderr.write(`warning: ${visibilityError}; listing order rows only\n`);
      out(
        items,
        table(items as unknown as Record<string, unknown>[], [
          'tenantId',
          'orderId',
          'status',
          'reason',
          'source',
          'updatedAt',
          'lastError',
          'temporalUiUrl',
        ]),
      );
      return 0;
    }
    case 'audit': {
      positionals(rest, [], 'audit');
      const entries = await operator.auditLog({
        ...(values.key ? { operationKey: values.key } : {}),
        ...(values.tenant ? { tenantId: values.tenant } : {}),
        ...(values.workflow ? { workflowId: values.workflow } : {}),
        ...(values.limit ? { limit: limit(values.limit)! } : {}),
      });
      out(entries, auditTable(entries));
      return 0;
    }
  }
  return 2;
}

// The CLI's errors are its output (stderr), not log lines. Signals end it the default way.
await runProcess('ops', ({ resources }) => main(process.argv.slice(2), resources), {
  handleSignals: false,
  onError: (err) => {
    if (err instanceof UsageError) {
      process.stderr.write(`error: ${err.message}\n\n${USAGE}`);
      return 2;
    }
    if (isOpsError(err)) {
      process.stderr.write(`error (${err.code}): ${err.message}\n`);
      return 1;
    }
    process.stderr.write(`error: ${err instanceof Error ? err.message : String(err)}\n`);
    return 1;
  },
});
