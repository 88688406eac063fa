/**
 * The ops CLI's command line (src/cli/ops.ts runs it): every command, its
 * arguments and options, and the checks on their values. A usage error exits 2
 * before any work starts (src/cli/command.ts).
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import type { OperationState } from 'onceflow';
import { createCommand, parseCli } from './command.ts';

const STATES = ['in_progress', 'unknown', 'succeeded', 'failed'] as const;

/** Every option any command takes; each command declares only its own (see `program` below). */
export interface Values {
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

/** A parsed command line: the command (`operator add` for a subcommand), its arguments and options. */
export interface ChosenCommand {
  command: string;
  args: string[];
  values: Values;
}

/** What the command line asked for, filled in by the chosen command's action. */
let chosen: ChosenCommand | undefined;

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

/** Parses process.argv into the chosen command; exits on --help (0) or bad usage (2). */
export function parseOpsCommandLine(): { chosen: ChosenCommand; json: boolean } {
  const cli = parseCli(program);
  if (!chosen) throw new Error('ops: no command was chosen'); // commander refuses that as a usage error first
  return { chosen, json: cli.json };
}
