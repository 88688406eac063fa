/**
 * Where one order's milliseconds go (issue 45): orders one at a time through the real HTTP API with
 * `Prefer: wait=10`, then each order's milestones read from what the stack itself recorded:
 *
 * - the client's clock at the POST and at the answer;
 * - the ledger: when the create's transaction, each status write, each claim and each completion
 *   ran (`now()` in their statements; a status write is one autocommitted statement);
 * - the order's Temporal history: the start, and when the worker's poll took the workflow task.
 *
 * All on one host clock. Orders go back to back (as bench:e2e's C=1) and 100 ms apart, in halves
 * A B B A. Prints the median and p90 of each step per pacing, with the dev server's own latency of
 * the transfer task that hands the first workflow task to matching, and writes
 * bench/results/order-trace.json. Needs Postgres; builds the Temporal CLI like `npm start`.
 *
 *   npm run bench:order-trace [-- --orders=200] [--warmup=20]
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import { loadConfig } from '../src/config.ts';
import { freePort } from '../src/process/ports.ts';
import { createPool } from '../src/db/index.ts';
import { createCommand, parseCli } from '../src/cli/command.ts';
import { OPERATION_TYPES, stepKeys, type OrderStatus } from '../src/orders/model.ts';
import {
  BenchProcesses,
  ROOT,
  createSeededDatabase,
  orderToTerminal,
  percentile,
  positiveInt,
  printColumns,
  round,
  startOrderStack,
  startTemporal,
} from './lib/stack.ts';

const program = createCommand(
  'bench:order-trace',
  "Where one order's milliseconds go, one order at a time (see docs/BENCHMARKS.md).",
)
  .option('--orders <n>', 'orders traced per pacing (back to back, and 100 ms apart)', '200')
  .option('--warmup <n>', 'orders run first and not traced', '20');
parseCli(program);
const opts = program.opts<{ orders: string; warmup: string }>();
const ORDERS = positiveInt(opts.orders, '--orders', 5_000);
const WARMUP = positiveInt(opts.warmup, '--warmup', 1_000);
/** Back to back (as bench:e2e's C=1), and far enough apart that one order's tail is over before the next. */
const GAPS_MS = [0, 100];
const API_KEY = 'sk_test_acme_local';
const TENANT = 'acme';

const say = (line: string) => console.log(`[order-trace] ${line}`);
const procs = new BenchProcesses(say);

/** The milestones, in the order an order reaches them; each step is the time from one to the next. */
const MILESTONES = [
  ['post', 'the client sends POST /v1/orders'],
  ['createTx', "the API's create transaction begins (auth, rate limit, validation before it)"],
  ['wfStarted', 'Temporal has started the workflow (commit, the relay, StartWorkflowExecution)'],
  ['taskStarted', "the worker's poll has the first workflow task (matching)"],
  // payment_pending and the charge's claim go side by side: the first of the two, then the other.
  ['paymentPending', 'the charge step begins (a new workflow in the worker, up to its first statement)'],
  ['chargeClaimed', 'payment_pending written and the charge claimed'],
  ['chargeDone', 'the charge completed (the provider call)'],
  ['paid', 'paid written (the next local activity, after the charge)'],
  ['receiptDone', 'the receipt claimed, sent and completed'],
  ['completed', 'completed written'],
  ['answered', 'the client has the 200 (notification, reads, response)'],
] as const;
type Milestone = (typeof MILESTONES)[number][0];
type Traced = { postedAt: number; ms: number; idempotencyKey: string; workflowId: string };
type TransferDelta = { count: number; load: number; processing: number };
type P = { p50: number; p90: number };
interface Pacing {
  gapMs: number;
  orders: number;
  postToAnswerMs: P;
  /** Null when the dev server reported no such tasks (its metrics changed). */
  workflowTaskTransferMs: { load: number; processing: number } | null;
  steps: (P & { from: Milestone; to: Milestone; what: string })[];
}

/**
 * The dev server's counters for the transfer task that hands a workflow task to matching: how long
 * tasks waited to be loaded by the history's queue reader, and then to be processed (sums in ms).
 */
async function transferTaskMs(port: number): Promise<TransferDelta> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const sum = (metric: string) =>
    text
      .split('\n')
      .filter((l) => l.startsWith(`${metric}{`) && l.includes('operation="TransferActiveTaskWorkflowTask"'))
      .reduce((a, l) => a + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
  return {
    count: sum('task_latency_load_count'),
    load: sum('task_latency_load_sum') * 1000,
    processing: sum('task_latency_processing_sum') * 1000,
  };
}

function delta(a: TransferDelta, b: TransferDelta): TransferDelta {
  return { count: b.count - a.count, load: b.load - a.load, processing: b.processing - a.processing };
}

async function main(): Promise<void> {
  const started = Date.now();
  const runId = `${Date.now().toString(36)}${process.pid}`;
  const config = loadConfig(process.env, ROOT);
  const runDir = path.join(config.dataDir, 'bench', runId);
  fs.mkdirSync(runDir, { recursive: true });
  const dbName = `onceflow_bench_trace_${runId}`;
  const databaseUrl = await createSeededDatabase(config, dbName, procs);
  const metricsPort = await freePort();
  const temporal = await startTemporal(config, { backend: 'dev', dbName, runDir, metricsPort }, procs, say);
  const connection = await Connection.connect({ address: temporal.address });
  const client = new Client({ connection });
  const pool = createPool(databaseUrl, { max: 2 });
  try {
    const stack = await startOrderStack(
      {
        databaseUrl,
        address: temporal.address,
        runDir,
        taskQueue: `bench-trace-${runId}`,
        workers: 1,
        apiProcesses: 1,
        client,
      },
      procs,
    );
    say(`stack up; ${WARMUP} warm-up orders, then ${ORDERS} traced per pacing, one at a time`);
    for (let i = 0; i < WARMUP; i++) {
      await orderToTerminal(stack.api, { apiKey: API_KEY, idempotencyKey: randomUUID(), i, preferWait: 10 });
    }
    // Back to back (bench:e2e's C=1) and spaced, in halves A B B A so a drift of the machine hits both.
    const traced = new Map<number, Traced[]>(GAPS_MS.map((g) => [g, []]));
    const halves = [...GAPS_MS, ...[...GAPS_MS].reverse()];
    const transfer = new Map<number, TransferDelta[]>();
    let unanswered = 0;
    for (const [h, gap] of halves.entries()) {
      const count = h < GAPS_MS.length ? Math.ceil(ORDERS / 2) : Math.floor(ORDERS / 2);
      const before = await transferTaskMs(metricsPort);
      for (let i = 0; i < count; i++) {
        const idempotencyKey = randomUUID();
        const o = await orderToTerminal(stack.api, { apiKey: API_KEY, idempotencyKey, i, preferWait: 10 });
        if (o.status !== 'completed' || !o.workflowId) throw new Error(`order ${o.id} ended ${o.status}`);
        // Not answered within the wait: its answer came from a GET, which is not this trace's path.
        if (!o.answered) {
          unanswered++;
          continue;
        }
        traced.get(gap)!.push({ ...o, idempotencyKey, workflowId: o.workflowId });
        if (gap > 0) await new Promise((resolve) => setTimeout(resolve, gap));
      }
      const after = await transferTaskMs(metricsPort);
      transfer.set(gap, [...(transfer.get(gap) ?? []), delta(before, after)]);
      say(`  half ${h + 1}/${halves.length}: ${count} orders, ${gap} ms apart`);
    }
    const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
    const pacings: Pacing[] = [];
    for (const gap of GAPS_MS) {
      const steps = new Map<Milestone, number[]>(MILESTONES.slice(1).map(([m]) => [m, []]));
      const totals: number[] = [];
      for (const o of traced.get(gap)!) {
        const at = await milestones(pool, client, o);
        at.post = o.postedAt;
        at.answered = o.postedAt + o.ms;
        for (let k = 1; k < MILESTONES.length; k++) {
          steps.get(MILESTONES[k]![0])!.push(at[MILESTONES[k]![0]]! - at[MILESTONES[k - 1]![0]]!);
        }
        totals.push(o.ms);
      }
      const total = sorted(totals);
      const deltas = transfer.get(gap)!;
      const n = deltas.reduce((a, d) => a + d.count, 0);
      pacings.push({
        gapMs: gap,
        orders: totals.length,
        postToAnswerMs: { p50: round(percentile(total, 50)), p90: round(percentile(total, 90)) },
        // The dev server's own view of the workflow task's transfer task (history -> matching), mean ms.
        workflowTaskTransferMs:
          n > 0
            ? {
                load: round(deltas.reduce((a, d) => a + d.load, 0) / n),
                processing: round(deltas.reduce((a, d) => a + d.processing, 0) / n),
              }
            : null,
        steps: MILESTONES.slice(1).map(([m, what], k) => {
          const xs = sorted(steps.get(m)!);
          return {
            from: MILESTONES[k]![0],
            to: m,
            what,
            p50: round(percentile(xs, 50)),
            p90: round(percentile(xs, 90)),
          };
        }),
      });
    }
    printColumns([
      ['step', ...pacings.flatMap((p) => [`p50 ms (${p.gapMs} ms apart)`, 'p90'])],
      ...MILESTONES.slice(1).map(([m], k) => [
        `${MILESTONES[k]![0]} -> ${m}`,
        ...pacings.flatMap((p) => [p.steps[k]!.p50.toFixed(1), p.steps[k]!.p90.toFixed(1)]),
      ]),
      [
        'POST to answer',
        ...pacings.flatMap((p) => [p.postToAnswerMs.p50.toFixed(1), p.postToAnswerMs.p90.toFixed(1)]),
      ],
      [
        'transfer task load / processing (mean)',
        ...pacings.flatMap((p) => [
          p.workflowTaskTransferMs
            ? `${p.workflowTaskTransferMs.load} / ${p.workflowTaskTransferMs.processing}`
            : 'n/a',
          '',
        ]),
      ],
    ]);
    const out = path.join(ROOT, 'bench/results/order-trace.json');
    const report = {
      generatedAt: new Date().toISOString(),
      machine: {
        cpus: os.cpus().length,
        cpuModel: os.cpus()[0]?.model ?? 'unknown',
        loadAverage1m: round(os.loadavg()[0] ?? 0, 2),
        node: process.version,
      },
      // Orders whose POST answered 202 (then a GET): left out of the steps.
      unanswered,
      options: { orders: ORDERS, warmup: WARMUP, gapsMs: GAPS_MS, preferWait: 10, backend: 'dev' },
      // Per pacing; medians of the steps need not add up to the median of the whole.
      pacings,
    };
    fs.writeFileSync(out, `${JSON.stringify(report, null, 2)}\n`);
    say(`wrote ${path.relative(process.cwd(), out)} in ${Math.round((Date.now() - started) / 1000)} s`);
  } finally {
    await pool.end().catch(() => undefined);
    await connection.close().catch(() => undefined);
    await procs.cleanup();
  }
  fs.rmSync(runDir, { recursive: true, force: true });
}

/** One order's milestones (ms since the epoch, fractional) from the ledger and the history. */
async function milestones(
  pool: ReturnType<typeof createPool>,
  client: Client,
  o: { idempotencyKey: string; workflowId: string },
): Promise<Partial<Record<Milestone, number>>> {
  const wf = o.workflowId;
  const status = (s: OrderStatus) => ({ type: OPERATION_TYPES.status, key: stepKeys.status(wf, s) });
  const wanted = {
    createTx: { type: OPERATION_TYPES.createOrder, key: o.idempotencyKey },
    paymentPending: status('payment_pending'),
    charge: { type: OPERATION_TYPES.charge, key: stepKeys.charge(wf) },
    paid: status('paid'),
    receipt: { type: OPERATION_TYPES.receipt, key: stepKeys.receipt(wf) },
    completed: status('completed'),
  };
  const { rows } = await pool.query<{ name: string; created: number; done: number | null }>(
    `select w.name, extract(epoch from o.created_at) * 1000 as created,
            extract(epoch from o.completed_at) * 1000 as done
       from unnest($2::text[], $3::text[], $4::text[]) as w(name, type, key)
       join operations o on o.tenant_id = $1 and o.operation_type = w.type and o.key = w.key`,
    [
      TENANT,
      Object.keys(wanted),
      Object.values(wanted).map((w) => w.type),
      Object.values(wanted).map((w) => w.key),
    ],
  );
  const row = (name: keyof typeof wanted) => {
    const r = rows.find((x) => x.name === name);
    if (!r) throw new Error(`${wf}: no ${name} record`);
    return r;
  };
  const events = (await client.workflow.getHandle(wf).fetchHistory()).events ?? [];
  const eventMs = (pick: (e: (typeof events)[number]) => unknown) => {
    const e = events.find((x) => pick(x));
    const t = e?.eventTime;
    if (!t) throw new Error(`${wf}: history event missing`);
    return Number(t.seconds ?? 0) * 1000 + (t.nanos ?? 0) / 1e6;
  };
  return {
    createTx: Number(row('createTx').created),
    wfStarted: eventMs((e) => e.workflowExecutionStartedEventAttributes),
    taskStarted: eventMs((e) => e.workflowTaskStartedEventAttributes),
    paymentPending: Math.min(Number(row('paymentPending').created), Number(row('charge').created)),
    chargeClaimed: Math.max(Number(row('paymentPending').created), Number(row('charge').created)),
    chargeDone: Number(row('charge').done),
    paid: Number(row('paid').created),
    receiptDone: Number(row('receipt').done),
    completed: Number(row('completed').created),
  };
}

main().catch(async (err: unknown) => {
  console.error(err);
  await procs.cleanup();
  process.exit(1);
});
