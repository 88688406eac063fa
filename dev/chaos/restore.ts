/**
 * The restore drill (issue #28): what happens to orders when the onceflow
 * database goes back to a backup while Temporal and the provider keep
 * everything that happened since.
 *
 * While orders flow, the database is dumped with pg_dump (T0 = when the dump
 * started); orders keep flowing for a gap; then the API and the workers are
 * stopped, the dump is restored into the same database, and
 * `ops recover-after-restore --since T0` rebuilds what the restore took
 * (unless --skip-recovery); then everything starts again, the clients that
 * were in flight keep retrying under their keys, and every client that had
 * seen a 202 sends its POST once more under its original key: it must get the
 * original 202 back.
 *
 * Only the product's tables go back in time: the sandbox provider's store
 * shares the database (schema `sandbox`) but stands for a provider, which
 * keeps its charges, so it is left out of the dump and thus of the restore.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import type { ReplayCheck } from './invariants.ts';
import { postUntilAnswered, sleep, type AcceptedOrder, type LoadStats } from './load.ts';
import { withDb } from './facts.ts';
import type { ChaosDatabase } from './postgres.ts';
import { TENANT_API_KEY, type ChaosStack } from './stack.ts';

/** The sandbox provider's schema: the provider's own store, never restored with onceflow's. */
const PROVIDER_SCHEMA = 'sandbox';
/** application_name of the processes the drill stops (src/api/main.ts, src/worker/main.ts). */
const STOPPED_APPS = ['onceflow-api', 'onceflow-worker'];

/**
 * The Postgres client tool matching the server's major version (a pg_dump
 * older than the server refuses to dump it): the server's own bin folder when
 * installed the Debian way, else whatever is on PATH.
 */
async function pgTool(db: ChaosDatabase, name: 'pg_dump' | 'pg_restore'): Promise<string> {
  const num = await withDb(db.adminUrl, async (c) => {
    const { rows } = await c.query<{ server_version_num: string }>('show server_version_num');
    return Number(rows[0]!.server_version_num);
  });
  const candidate = path.join('/usr/lib/postgresql', String(Math.floor(num / 10_000)), 'bin', name);
  return fs.existsSync(candidate) ? candidate : name;
}

/** Runs a tool to completion, its output lines to the log; throws on a non-zero exit or after `timeoutMs`. */
async function runLogged(
  what: string,
  command: string,
  args: readonly string[],
  opts: { env?: NodeJS.ProcessEnv; cwd?: string; timeoutMs: number; log: (line: string) => void },
): Promise<void> {
  // Its own process group, so a timeout ends it and everything it started, and nothing else.
  const child = spawn(command, args, {
    env: opts.env ?? process.env,
    cwd: opts.cwd,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  for (const stream of [child.stdout, child.stderr]) {
    readline.createInterface({ input: stream }).on('line', (l) => opts.log(`${what}: ${l}`));
  }
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
  }, opts.timeoutMs);
  const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (c, s) => resolve([c, s]));
  }).finally(() => clearTimeout(timer));
  if (timedOut) throw new Error(`${what} did not finish within ${opts.timeoutMs / 1000} s (killed)`);
  if (code !== 0) throw new Error(`${what} failed (${signal ? `signal ${signal}` : `exit code ${code}`})`);
}

/** pg_dump of onceflow's tables (custom format), the provider's schema left out. */
export async function dumpDatabase(db: ChaosDatabase, file: string, log: (l: string) => void): Promise<void> {
  await runLogged(
    'pg_dump',
    await pgTool(db, 'pg_dump'),
    ['--format=custom', `--exclude-schema=${PROVIDER_SCHEMA}`, `--file=${file}`, `--dbname=${db.url}`],
    { timeoutMs: 120_000, log },
  );
}

/**
 * Waits for the stopped processes' backends to leave (a stopped pool closes
 * them), then terminates any that remain: only those of the processes the
 * drill stopped, in this run's own database. Returns how many it terminated.
 */
export async function clearStoppedConnections(db: ChaosDatabase): Promise<number> {
  const query = (terminate: boolean) =>
    withDb(db.adminUrl, async (c) => {
      const { rows } = await c.query<{ n: string }>(
        `select count(*) filter (where ${terminate ? 'pg_terminate_backend(pid)' : 'true'}) as n
           from pg_stat_activity
          where datname = $1 and application_name = any($2::text[]) and pid <> pg_backend_pid()`,
        [db.databaseName, STOPPED_APPS],
      );
      return Number(rows[0]?.n ?? 0);
    });
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    if ((await query(false)) === 0) return 0;
    await sleep(250);
  }
  return query(true);
}

/**
 * The dump back into the same database: its tables dropped and recreated,
 * in one transaction, so a failure leaves the database as it was.
 */
export async function restoreDatabase(
  db: ChaosDatabase,
  file: string,
  log: (l: string) => void,
): Promise<void> {
  await runLogged(
    'pg_restore',
    await pgTool(db, 'pg_restore'),
    [
      '--clean',
      '--if-exists',
      '--single-transaction',
      '--exit-on-error',
      '--no-owner',
      `--dbname=${db.url}`,
      file,
    ],
    { timeoutMs: 120_000, log },
  );
}

/** `ops recover-after-restore --since T0`, with the environment the stack's processes get. */
export async function runRecovery(
  stack: ChaosStack,
  t0: Date,
  timeoutMs: number,
  log: (l: string) => void,
): Promise<void> {
  await runLogged(
    'recover',
    process.execPath,
    [
      '--import',
      'tsx',
      path.join(stack.opts.root, 'src/cli/ops.ts'),
      'recover-after-restore',
      '--since',
      t0.toISOString(),
    ],
    { env: stack.serviceEnv, cwd: stack.opts.root, timeoutMs, log },
  );
}

/**
 * Every client that had seen a 202 sends its POST once more, under its
 * original key and body (a client that lost the response, or is simply
 * unsure), all at once as independent clients would, each retrying as the
 * load does until a definite answer or `giveUpAt`. An answer naming another
 * order is also recorded on the submission: the client now holds two orders
 * for one intent, and the verdict judges both.
 */
export async function replayAccepted(
  stack: ChaosStack,
  accepted: readonly AcceptedOrder[],
  t0: number,
  opts: { giveUpAt: number; rng: () => number; signal: AbortSignal },
): Promise<ReplayCheck[]> {
  const stats: LoadStats = { requests: 0, retries: 0, replays: 0, refundRequests: 0 };
  const replay = async (a: AcceptedOrder): Promise<ReplayCheck> => {
    const answer = await postUntilAnswered(
      { apiKey: TENANT_API_KEY, giveUpAt: () => opts.giveUpAt, rng: opts.rng, signal: opts.signal },
      stats,
      `${stack.apiUrl}/v1/orders`,
      a.submission.clientKey,
      a.body,
      false,
    );
    const check: ReplayCheck = {
      clientKey: a.submission.clientKey,
      afterBackup: a.at >= t0,
      original: { orderId: a.orderId, body: a.response },
      replay: answer.kind === 'gave_up' ? answer : { kind: 'answer', ...parsed(answer) },
    };
    if (check.replay.kind === 'answer' && check.replay.status === 202) {
      const id = (check.replay.body as { id?: unknown } | null)?.id;
      if (typeof id === 'string' && !a.submission.orderIds.includes(id)) a.submission.orderIds.push(id);
    }
    return check;
  };
  return Promise.all(accepted.map(replay));
}

function parsed(answer: { status: number; text: string; replayed: boolean }): {
  status: number;
  body: unknown;
  replayed: boolean;
} {
  let body: unknown;
  try {
    body = JSON.parse(answer.text);
  } catch {
    body = answer.text;
  }
  return { status: answer.status, body, replayed: answer.replayed };
}
