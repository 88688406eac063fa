/**
 * Benchmark (not a test) of the ledger's local-mode hot path against raw SQL
 * on an equivalent table, at 1, 8 and 32 connections.
 *
 *   npm run bench:ledger [-- --seconds=3] [--connections=8]
 *
 * - fresh claim: `runLocal` on a new key with a trivial body (claim +
 *   complete in one transaction) as it runs by default and with `readFirst`,
 *   and
 *   `runLocalStatement` (one statement, as the order's status steps run), vs. a bare `insert ... on conflict do
 *   nothing` plus `update`, and vs. the physical limit: the same two
 *   statements prepared, in ONE transaction (what pgbench -M prepared does);
 * - replay: `runLocal` on a completed key (by default, through the claim, and
 *   with `readFirst`) vs. a primary-key `select`.
 * Each variant's CPU per operation is reported too: this process's (the
 * client's) and its Postgres backends' (from /proc, when Postgres is local).
 * Creates its own throwaway database (dropped at the end), prints a table and
 * writes bench/results/ledger.json.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes, randomUUID } from 'node:crypto';
import { loadConfig } from '../src/config.ts';
import { createPool, type Pool } from '../src/db/index.ts';
import { createThrowawayDatabase } from '../src/db/migrate.ts';
import { Ledger, LocalStatement } from 'onceflow';
import { InvalidArgumentError } from 'commander';
import { createCommand, parseCli } from '../src/cli/command.ts';
import { cpuSeconds, visibleInProc } from './lib/proc-cpu.ts';

function levels(raw: string): number[] {
  const list = raw.split(',').map(Number);
  if (list.some((n) => !Number.isInteger(n) || n <= 0 || n > 64))
    throw new InvalidArgumentError('must be a comma-separated list of integers in [1, 64]');
  return list;
}
function measureSeconds(raw: string): number {
  const n = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(n) || n <= 0 || n > 60)
    throw new InvalidArgumentError('must be in (0, 60]');
  return n;
}
const program = createCommand(
  'bench:ledger',
  "Benchmark of the ledger's local-mode hot path against raw SQL, on a throwaway database.",
)
  .option('--seconds <s>', 'measured seconds per case, in (0, 60]', measureSeconds, 2)
  .option('--connections <list>', 'comma-separated connection counts, each in [1, 64]', levels, [1, 8, 32])
  .addHelpText(
    'after',
    '\nRun as: npm run bench:ledger [-- options], e.g. npm run bench:ledger -- --seconds=3',
  );
parseCli(program);
const { seconds, connections: LEVELS } = program.opts<{ seconds: number; connections: number[] }>();
const measureMs = seconds * 1000;
const warmupMs = Math.min(400, measureMs / 4);
const REPLAY_KEYS = 1000;

/** Runs `op` on `workers` concurrent loops for `ms`; returns the number of completed operations. */
async function run(workers: number, ms: number, op: Op): Promise<number> {
  let done = 0;
  const deadline = performance.now() + ms;
  await Promise.all(
    Array.from({ length: workers }, async (_, w) => {
      for (let i = 0; performance.now() < deadline; i++) {
        await op(w, i);
        done++;
      }
    }),
  );
  return done;
}

type Op = (worker: number, i: number) => Promise<unknown>;

/** CPU per operation of one variant: this process (the client) and the pool's Postgres backends. */
interface CpuPerOp {
  clientMicros: number;
  /** null when the backends are not visible in this machine's /proc (a remote Postgres). */
  postgresMicros: number | null;
}

/** The pool's Postgres backends (every client backend of its database; nothing else connects there). */
async function backendPids(pool: Pool): Promise<number[]> {
  const { rows } = await pool.query<{ pid: number }>(
    `select pid from pg_stat_activity where datname = current_database() and backend_type = 'client backend'`,
  );
  return rows.map((r) => r.pid);
}

/**
 * Measures several variants of one operation fairly on a shared, noisy
 * machine: after a warm-up, the variants take turns in short segments in
 * ABBA order (A B B A A B ...), so slow drift in background load hits every
 * variant alike. Returns operations per second per variant, and CPU per
 * operation: this process's (the client's) and its Postgres backends'
 * (from /proc, when Postgres runs on this machine), which say where a
 * variant's time goes.
 */
async function compare(
  pool: Pool,
  workers: number,
  variants: Record<string, Op>,
): Promise<{ rates: Record<string, number>; cpu: Record<string, CpuPerOp> }> {
  const names = Object.keys(variants);
  const ops = Object.fromEntries(names.map((n) => [n, 0]));
  const client = Object.fromEntries(names.map((n) => [n, 0]));
  const postgres = Object.fromEntries(names.map((n) => [n, 0]));
  let postgresVisible = true;
  for (const n of names) await run(workers, warmupMs, variants[n] as Op);
  await pool.query('checkpoint'); // don't let one variant pay for another's dirty pages
  const rounds = 4;
  const segmentMs = measureMs / rounds;
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 === 0 ? names : [...names].reverse();
    for (const n of order) {
      const pids = await backendPids(pool);
      postgresVisible &&= pids.length > 0 && pids.every(visibleInProc);
      const pgBefore = pids.reduce((sum, pid) => sum + cpuSeconds(pid), 0);
      const cpuBefore = process.cpuUsage();
      ops[n] = (ops[n] ?? 0) + (await run(workers, segmentMs, variants[n] as Op));
      const used = process.cpuUsage(cpuBefore);
      client[n] = (client[n] ?? 0) + (used.user + used.system);
      postgres[n] =
        (postgres[n] ?? 0) + (pids.reduce((sum, pid) => sum + cpuSeconds(pid), 0) - pgBefore) * 1e6;
    }
  }
  const cpu = Object.fromEntries(
    names.map((n) => {
      const count = ops[n] || Number.NaN;
      return [
        n,
        {
          clientMicros: round((client[n] ?? 0) / count, 0),
          postgresMicros: postgresVisible ? round((postgres[n] ?? 0) / count, 0) : null,
        },
      ];
    }),
  );
  return { rates: Object.fromEntries(names.map((n) => [n, (ops[n] ?? 0) / seconds])), cpu };
}

async function main(): Promise<void> {
  const config = loadConfig();
  const database = await createThrowawayDatabase(
    config.databaseUrl,
    `onceflow_bench_${process.pid}_${randomBytes(3).toString('hex')}`,
  );
  const url = database.url;
  const results: Record<string, unknown> = {};
  try {
    const setup = createPool(url, { max: 1 });
    // The baseline table is the ledger's table: same columns, constraints and indexes.
    await setup.query('create table bench_raw (like operations including all)');
    const { rows } = await setup.query<{ v: string }>('select version() as v');
    await setup.end();

    // The raw baseline: the same statements a hand-written claim would run,
    // bare (autocommitted, unnamed). `prepared` is the same SQL as named
    // prepared statements, shown for transparency: the ledger prepares its
    // hot statements, so this isolates what the ledger itself adds.
    const INSERT_RAW = `insert into bench_raw (tenant_id, operation_type, key, fingerprint, schema_version, state,
         owner_token, lease_expires_at)
       values ($1, $2, $3, $4, 1, 'in_progress', $5, now() + interval '30 seconds')
       on conflict (tenant_id, operation_type, key) do nothing`;
    const UPDATE_RAW = `update bench_raw set state = 'succeeded', result = $5::json, owner_token = null,
         lease_expires_at = null, completed_at = now(), updated_at = now()
       where tenant_id = $1 and operation_type = $2 and key = $3 and owner_token = $4`;
    const SELECT_RAW = `select fingerprint, state, result from bench_raw
       where tenant_id = $1 and operation_type = $2 and key = $3`;
    const rawFresh = async (pool: Pool, type: string, key: string, prepared: boolean) => {
      const token = randomUUID();
      const insert = ['bench', type, key, 'f', token];
      const update = ['bench', type, key, token, '{"ok":true}'];
      if (prepared) {
        await pool.query({ name: 'raw_insert', text: INSERT_RAW, values: insert });
        await pool.query({ name: 'raw_update', text: UPDATE_RAW, values: update });
      } else {
        await pool.query(INSERT_RAW, insert);
        await pool.query(UPDATE_RAW, update);
      }
    };
    // The physical limit of a fresh claim: BEGIN, prepared insert, prepared
    // update, COMMIT on one connection: four round trips, one WAL flush.
    const rawFreshTx = async (pool: Pool, type: string, key: string) => {
      const token = randomUUID();
      const client = await pool.connect();
      try {
        await client.query('begin');
        await client.query({
          name: 'raw_insert',
          text: INSERT_RAW,
          values: ['bench', type, key, 'f', token],
        });
        await client.query({
          name: 'raw_update',
          text: UPDATE_RAW,
          values: ['bench', type, key, token, '{"ok":true}'],
        });
        await client.query('commit');
      } finally {
        client.release();
      }
    };
    const rawReplay = (pool: Pool, key: string, prepared: boolean) => {
      const values = ['bench', 'bench.replay', key];
      return prepared
        ? pool.query({ name: 'raw_select', text: SELECT_RAW, values })
        : pool.query(SELECT_RAW, values);
    };

    for (const n of LEVELS) {
      const pool = createPool(url, { max: n });
      const ledger = new Ledger(pool);
      await Promise.all(Array.from({ length: n }, () => pool.query('select 1')));
      const input = (i: number) => ({ schemaVersion: 1, value: { i } });
      const scope = (type: string, key: string) => ({ tenantId: 'bench', operationType: type, key });
      console.log(`[bench] ${n} connection(s)`);

      // Completed keys to replay, in both tables (seeded with n workers).
      let next = 0;
      await Promise.all(
        Array.from({ length: n }, async () => {
          for (let i = next++; i < REPLAY_KEYS; i = next++) {
            await ledger.runLocal(scope('bench.replay', `r${n}-${i}`), input(i), async () => ({
              ok: true,
              i,
            }));
            await rawFresh(pool, 'bench.replay', `r${n}-${i}`, false);
          }
        }),
      );

      let seq = 0; // fresh keys are never reused across variants, segments or warm-ups
      const { rates: fresh, cpu: freshCpu } = await compare(pool, n, {
        raw: () => rawFresh(pool, 'bench.fresh', `f${n}-${seq++}`, false),
        prepared: () => rawFresh(pool, 'bench.fresh', `f${n}-${seq++}`, true),
        tx: () => rawFreshTx(pool, 'bench.fresh', `f${n}-${seq++}`),
        // The default: claim first (2 round trips).
        ledger: (_w, i) =>
          ledger.runLocal(scope('bench.fresh', `f${n}-${seq++}`), input(i), async () => ({ ok: true })),
        // Read first (3 round trips), as a retried activity does.
        ledgerReadFirst: (_w, i) =>
          ledger.runLocal(scope('bench.fresh', `f${n}-${seq++}`), input(i), async () => ({ ok: true }), {
            readFirst: true,
          }),
        // As the order's status steps run now: the body, the claim and the record in one
        // autocommitted statement (runLocalStatement); here the body writes nothing, like the others'.
        ledgerStatement: (_w, i) =>
          ledger.runLocalStatement(
            scope('bench.fresh', `f${n}-${seq++}`),
            input(i),
            new LocalStatement({
              name: 'bench_ok',
              ctes: `ledger_result as (select json_build_object('ok', true) as result)`,
              values: [],
            }),
          ),
      });
      const pick = (w: number, i: number) => (w * 7919 + i) % REPLAY_KEYS;
      const replayLocal = (k: number, readFirst: boolean) =>
        ledger.runLocal(
          scope('bench.replay', `r${n}-${k}`),
          input(k),
          async () => {
            throw new Error('a replay must not run the body');
          },
          { readFirst },
        );
      const { rates: replay, cpu: replayCpu } = await compare(pool, n, {
        raw: (w, i) => rawReplay(pool, `r${n}-${pick(w, i)}`, false),
        prepared: (w, i) => rawReplay(pool, `r${n}-${pick(w, i)}`, true),
        // The default: a replay found through the claim (BEGIN, claim, ROLLBACK, read).
        ledger: (w, i) => replayLocal(pick(w, i), false),
        ledgerReadFirst: (w, i) => replayLocal(pick(w, i), true),
      });
      await pool.end();

      const get = (m: Record<string, number>, k: string) => m[k] ?? Number.NaN;
      results[String(n)] = {
        freshClaimRatio: round(get(fresh, 'ledger') / get(fresh, 'raw'), 3),
        replayRatio: round(get(replay, 'ledger') / get(replay, 'raw'), 3),
        freshClaimRatioVsPrepared: round(get(fresh, 'ledger') / get(fresh, 'prepared'), 3),
        /** Against the physical limit: one transaction, prepared (the target: >= 0.8 at 8). */
        freshClaimRatioVsOneTx: round(get(fresh, 'ledger') / get(fresh, 'tx'), 3),
        /** Reading first (`readFirst: true`). */
        freshClaimReadFirstRatioVsOneTx: round(get(fresh, 'ledgerReadFirst') / get(fresh, 'tx'), 3),
        /** One statement (`runLocalStatement`, what the status steps use now). */
        freshClaimStatementRatioVsOneTx: round(get(fresh, 'ledgerStatement') / get(fresh, 'tx'), 3),
        replayRatioVsPrepared: round(get(replay, 'ledger') / get(replay, 'prepared'), 3),
        ledger: {
          freshClaimsPerSec: round(get(fresh, 'ledger'), 0),
          replaysPerSec: round(get(replay, 'ledger'), 0),
        },
        ledgerReadFirst: {
          freshClaimsPerSec: round(get(fresh, 'ledgerReadFirst'), 0),
          replaysPerSec: round(get(replay, 'ledgerReadFirst'), 0),
        },
        ledgerStatement: { freshClaimsPerSec: round(get(fresh, 'ledgerStatement'), 0) },
        raw: { freshClaimsPerSec: round(get(fresh, 'raw'), 0), replaysPerSec: round(get(replay, 'raw'), 0) },
        rawPrepared: {
          freshClaimsPerSec: round(get(fresh, 'prepared'), 0),
          replaysPerSec: round(get(replay, 'prepared'), 0),
        },
        rawOneTxPrepared: { freshClaimsPerSec: round(get(fresh, 'tx'), 0) },
        /** Where each variant's time goes: microseconds of CPU per operation, client and Postgres. */
        cpuMicrosPerOp: { fresh: freshCpu, replay: replayCpu },
      };
    }

    const cpus = os.cpus();
    const report = {
      generatedAt: new Date().toISOString(),
      secondsPerMeasurement: seconds,
      machine: {
        cpus: cpus.length,
        cpuModel: cpus[0]?.model ?? 'unknown',
        memoryGiB: round(os.totalmem() / 2 ** 30, 1),
        node: process.version,
        postgres: rows[0]?.v ?? 'unknown',
      },
      connections: results,
    };
    printTable(results);
    printCpuTable(results);
    const out = path.resolve(import.meta.dirname, 'results/ledger.json');
    fs.mkdirSync(path.dirname(out), { recursive: true });
    fs.writeFileSync(out, `${JSON.stringify(report, null, 2)}\n`);
    console.log(`\nwrote ${path.relative(process.cwd(), out)}`);
  } finally {
    await database.drop();
  }
}

function round(x: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

function printTable(results: Record<string, unknown>): void {
  type Rates = { freshClaimsPerSec: number; replaysPerSec: number };
  type Row = {
    freshClaimRatio: number;
    freshClaimRatioVsOneTx: number;
    freshClaimReadFirstRatioVsOneTx: number;
    freshClaimStatementRatioVsOneTx: number;
    replayRatio: number;
    ledger: Rates;
    raw: Rates;
    rawPrepared: Rates;
    rawOneTxPrepared: { freshClaimsPerSec: number };
    ledgerReadFirst: Rates;
    ledgerStatement: { freshClaimsPerSec: number };
  };
  const header = [
    'conns',
    'fresh ledger/s',
    'fresh raw/s',
    'fresh ratio',
    '(raw prep/s)',
    '1-tx prep/s',
    'vs 1-tx',
    'read first/s',
    'vs 1-tx',
    '1-stmt/s',
    'vs 1-tx',
    'replay ledger/s',
    'replay raw/s',
    'replay ratio',
    '(raw prep/s)',
    'read first/s',
  ];
  const lines = [header];
  for (const [n, value] of Object.entries(results)) {
    const r = value as Row;
    lines.push([
      n,
      String(r.ledger.freshClaimsPerSec),
      String(r.raw.freshClaimsPerSec),
      r.freshClaimRatio.toFixed(2),
      String(r.rawPrepared.freshClaimsPerSec),
      String(r.rawOneTxPrepared.freshClaimsPerSec),
      r.freshClaimRatioVsOneTx.toFixed(2),
      String(r.ledgerReadFirst.freshClaimsPerSec),
      r.freshClaimReadFirstRatioVsOneTx.toFixed(2),
      String(r.ledgerStatement.freshClaimsPerSec),
      r.freshClaimStatementRatioVsOneTx.toFixed(2),
      String(r.ledger.replaysPerSec),
      String(r.raw.replaysPerSec),
      r.replayRatio.toFixed(2),
      String(r.rawPrepared.replaysPerSec),
      String(r.ledgerReadFirst.replaysPerSec),
    ]);
  }
  const widths = header.map((_, i) => Math.max(...lines.map((l) => (l[i] ?? '').length)));
  console.log('');
  for (const l of lines) console.log(l.map((c, i) => c.padStart(widths[i] ?? 0)).join('  '));
}

/** Where the time goes: CPU microseconds per fresh claim, client (this process) + Postgres. */
function printCpuTable(results: Record<string, unknown>): void {
  const variants: [string, string][] = [
    ['tx', '1-tx prepared'],
    ['ledger', 'ledger'],
    ['ledgerReadFirst', 'read first'],
    ['ledgerStatement', '1-stmt'],
  ];
  const header = ['conns', ...variants.map(([, label]) => `${label} client+pg us`)];
  const lines = [header];
  for (const [n, value] of Object.entries(results)) {
    const cpu = (value as { cpuMicrosPerOp: { fresh: Record<string, CpuPerOp> } }).cpuMicrosPerOp.fresh;
    lines.push([
      n,
      ...variants.map(([key]) => {
        const c = cpu[key];
        return c ? `${c.clientMicros} + ${c.postgresMicros ?? '?'}` : '-';
      }),
    ]);
  }
  const widths = header.map((_, i) => Math.max(...lines.map((l) => (l[i] ?? '').length)));
  console.log('\nCPU per fresh claim, microseconds: this process (client) + its Postgres backends');
  for (const l of lines) console.log(l.map((c, i) => c.padStart(widths[i] ?? 0)).join('  '));
}

await main();
