/** Command-line flags of `npm run chaos`, parsed without side effects (tested on their own). */
import { PROVIDER_CHOICES } from './providers.ts';
import { parseArgs } from 'node:util';

export const SCENARIOS = [
  'worker-kill',
  'api-kill',
  'pg-terminate',
  'pg-restart',
  'temporal-kill',
  'pg-blackhole',
  'temporal-blackhole',
  'network-latency',
  'connection-reset',
  'provider-outage',
  'provider-faults',
  'merchant-down',
  'restore',
] as const;
export type ScenarioName = (typeof SCENARIOS)[number];

export interface ChaosOptions {
  /** Orders placed per scenario. */
  orders: number;
  /** Concurrent HTTP clients. */
  concurrency: number;
  /** How long the provider is down in provider-outage. */
  outageSeconds: number;
  /** How long the looping faults (worker kills, connection kills, rolling provider faults) and network-latency last. */
  faultSeconds: number;
  /** The bound: after the fault clears, every order must be settled within this. */
  settleSeconds: number;
  /** restore: how long orders keep flowing between the dump and the restore. */
  restoreGapSeconds: number;
  /** restore: the same drill without the recovery command (it must fail: lost orders held by the restore gate). */
  skipRecovery: boolean;
  scenarios: ScenarioName[];
  /** --providers: which real adapters replace the sandbox clients (./providers.ts). */
  providers: string[];
  json: boolean;
  /** Keep the run's folder (logs, Temporal's SQLite, the stopped private cluster's data); a shared-server database is still dropped. */
  keep: boolean;
  /** Use a throwaway database on DATABASE_URL's server even where a private cluster could run. */
  sharedPostgres: boolean;
  seed: number;
  help: boolean;
}

const DEFAULTS: Omit<
  ChaosOptions,
  'scenarios' | 'providers' | 'json' | 'keep' | 'sharedPostgres' | 'skipRecovery' | 'help'
> = {
  orders: 30,
  concurrency: 6,
  outageSeconds: 120,
  faultSeconds: 40,
  settleSeconds: 120,
  restoreGapSeconds: 12,
  seed: 1,
};

/**
 * restore: the sandbox forgets an idempotency key this long after its first
 * use, shorter than any gap --restore-gap-seconds allows, so that the
 * recovery, not the provider's key dedupe, is what stops a second charge.
 */
export const RESTORE_KEY_WINDOW_MS = 3_000;

/** `items` joined by commas, in lines of at most `width` characters, each after `indent`. */
function wrapList(items: readonly string[], indent: string, width = 80): string {
  const lines: string[] = [];
  let line = '';
  for (const [i, item] of items.entries()) {
    const word = i < items.length - 1 ? `${item},` : item;
    if (line && indent.length + line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else line = line ? `${line} ${word}` : word;
  }
  if (line) lines.push(line);
  return lines.map((l) => indent + l).join('\n');
}

export const USAGE = `usage: npm run chaos -- [options]

Starts a throwaway onceflow stack (own Temporal dev server, own Postgres cluster
or database, sandbox provider, two workers, API) on free ports, the API and the
workers reaching Postgres and Temporal through toxiproxy (built from its Go
module on first use), drives orders through the HTTP API while injecting one
fault per scenario, and checks after each: no double charge or receipt, no lost
order, every order settled (completed, rejected, or needs_attention with a
reason) within the settle bound, and no onceflow process exited on its own.
Every third completed order gets one or two refunds: each refund settled
(succeeded, failed or needs_attention), one provider refund per succeeded
refund and none for a failed one, and never more refunded than charged. A
merchant receiver in the harness, registered for the order events, must get
every settled order's event (at least once; one event ID per transition,
processed once by its dedupe) within 60 s of the settle. The
restore scenario pg_dumps the database while orders flow, restores it after a
gap, runs \`ops recover-after-restore --since T0\`, and checks that every
client that had seen a 202 gets the original one back when it retries. During
the blackholes a probe also asks the API every 500 ms (create, read, /readyz):
a 500, an answer slower than 5 s, or none within 15 s is a violation. Exit 0
when every scenario passes, 1 on any violation, 2 on bad usage.

options:
  --orders N            orders per scenario (default ${DEFAULTS.orders})
  --concurrency N       concurrent HTTP clients (default ${DEFAULTS.concurrency})
  --outage-seconds S    provider outage length (default ${DEFAULTS.outageSeconds})
  --fault-seconds S     length of the looping faults and of network-latency (default ${DEFAULTS.faultSeconds})
  --settle-seconds S    bound for every order to settle after the fault clears (default ${DEFAULTS.settleSeconds})
  --scenarios A,B       subset, in this order (default: all):
${wrapList(SCENARIOS, ' '.repeat(24))}
                        (--scenario A is the same)
  --restore-gap-seconds S
                        restore: how long orders keep flowing between the pg_dump
                        and the restore (default ${DEFAULTS.restoreGapSeconds}, at least 5; the
                        sandbox's key window is ${RESTORE_KEY_WINDOW_MS / 1000} s during the drill)
  --skip-recovery       restore: the same drill without recover-after-restore, and
                        with the processes' restore detection off (RESTORE_DETECTION=off):
                        it must fail, and shows why the recovery exists: steps run
                        again past the key window and client retries make second
                        orders, so customers are charged twice
  --providers A,B       real adapters: stripe (the sandbox's Stripe surface), smtp (a local SMTP server)
  --seed N              seed for the fault schedule and order mix (default ${DEFAULTS.seed})
  --json                print the result as JSON instead of a table
  --keep                keep the run folder (logs, Temporal's SQLite, the stopped
                        private cluster's data); a shared-server database is dropped
  --shared-postgres     a throwaway database on DATABASE_URL's server instead of a
                        private cluster (pg-restart is then skipped: a shared
                        server is never restarted)
  -h, --help            this text
`;

export class UsageError extends Error {
  override name = 'UsageError';
}

function positive(name: string, raw: string | undefined, fallback: number, min = 1): number {
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min)
    throw new UsageError(`--${name} must be an integer >= ${min}, got ${JSON.stringify(raw)}`);
  return n;
}

function chaosProviderList(raw: string | undefined): string[] {
  const names = (raw ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  const unknown = names.filter((n) => !(PROVIDER_CHOICES as readonly string[]).includes(n));
  if (unknown.length)
    throw new UsageError(`unknown provider(s): ${unknown.join(', ')} (choose from stripe, smtp)`);
  return names;
}

export function parseChaosArgs(argv: readonly string[]): ChaosOptions {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...argv],
      allowPositionals: false,
      strict: true,
      options: {
        orders: { type: 'string' },
        concurrency: { type: 'string' },
        'outage-seconds': { type: 'string' },
        'fault-seconds': { type: 'string' },
        'settle-seconds': { type: 'string' },
        scenarios: { type: 'string' },
        scenario: { type: 'string' },
        'restore-gap-seconds': { type: 'string' },
        'skip-recovery': { type: 'boolean', default: false },
        seed: { type: 'string' },
        providers: { type: 'string' },
        json: { type: 'boolean', default: false },
        keep: { type: 'boolean', default: false },
        'shared-postgres': { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
    });
  } catch (err) {
    throw new UsageError(err instanceof Error ? err.message : String(err));
  }
  const v = parsed.values;
  if (v.scenarios !== undefined && v.scenario !== undefined)
    throw new UsageError('give --scenarios or --scenario, not both');
  const scenarioList = v.scenarios ?? v.scenario;
  let scenarios: ScenarioName[] = [...SCENARIOS];
  if (scenarioList !== undefined) {
    const names = scenarioList
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean);
    const unknown = names.filter((n) => !(SCENARIOS as readonly string[]).includes(n));
    if (unknown.length || names.length === 0) {
      throw new UsageError(`unknown scenario(s): ${unknown.join(', ') || '(none given)'}`);
    }
    scenarios = names as ScenarioName[];
  }
  return {
    orders: positive('orders', v.orders, DEFAULTS.orders),
    concurrency: positive('concurrency', v.concurrency, DEFAULTS.concurrency),
    outageSeconds: positive('outage-seconds', v['outage-seconds'], DEFAULTS.outageSeconds),
    faultSeconds: positive('fault-seconds', v['fault-seconds'], DEFAULTS.faultSeconds),
    settleSeconds: positive('settle-seconds', v['settle-seconds'], DEFAULTS.settleSeconds),
    restoreGapSeconds: positive(
      'restore-gap-seconds',
      v['restore-gap-seconds'],
      DEFAULTS.restoreGapSeconds,
      5,
    ),
    skipRecovery: v['skip-recovery'],
    seed: positive('seed', v.seed, DEFAULTS.seed, 0),
    scenarios,
    providers: chaosProviderList(v.providers),
    json: v.json,
    keep: v.keep,
    sharedPostgres: v['shared-postgres'],
    help: v.help,
  };
}
