/**
 * One scenario: orders through the API while its fault runs; once the fault
 * has cleared, wait (at most the settle bound) for every accepted order to
 * settle; then gather the facts and judge them (invariants.ts).
 */
import {
  checkScenario,
  missingEvents,
  REFUND_SETTLED,
  settlementOf,
  type RefundSubmission,
  type ReplayCheck,
  type Submission,
  type Verdict,
  type Violation,
  type WebhookCounts,
} from './invariants.ts';
import {
  readMoney,
  readOrders,
  readOrdersForCustomers,
  readOutbox,
  readPendingDeliveries,
  readProviderRefunds,
  readRefunds,
  readWorkflows,
  withDb,
} from './facts.ts';
import { customerPrefix, runLoad, seededRandom, sleep, type AcceptedOrder, type LoadStats } from './load.ts';
import type { ChaosOptions } from './options.ts';
import { FailFastProbe, PROBE_TAIL_MS, type ProbeReport } from './probe.ts';
import { httpOk } from '../wait.ts';
import { waitUntil } from './processes.ts';
import { clearSandboxFaults, DELIVERY_CATCH_UP_MS, SCENARIO_TABLE, type FaultContext } from './scenarios.ts';
import { TENANT_API_KEY, TENANT_ID, type ChaosStack } from './stack.ts';

export interface ScenarioResult {
  scenario: string;
  fault: string;
  status: 'PASS' | 'FAIL' | 'SKIP';
  note: string;
  counts: {
    submitted: number;
    accepted: number;
    completed: number;
    rejected: number;
    attention: number;
    stuck: number;
    /** Refunds accepted (202) for this scenario's completed orders. */
    refunds: number;
  };
  /** Seconds from the fault clearing until every accepted order (and refund) was settled; null if they never all did. */
  settledAfterSeconds: number | null;
  /** The slowest settled order, from its creation to its settlement. */
  slowestOrderSeconds: number | null;
  seconds: number;
  violations: Violation[];
  load?: LoadStats;
  /** The fail-fast probe's figures (the blackhole scenarios); its creates are among `counts`. */
  probe?: ProbeReport;
  /** The merchant's receiver, over this scenario's orders: distinct events, redeliveries absorbed, missing. */
  webhooks?: WebhookCounts;
  /** Seconds after the settle wait until every settled order's event had reached the merchant; null if some never did. */
  deliveredAfterSeconds?: number | null;
}

const emptyCounts = () => ({
  submitted: 0,
  accepted: 0,
  completed: 0,
  rejected: 0,
  attention: 0,
  stuck: 0,
  refunds: 0,
});

/** Before a scenario: everything up and answering, so one scenario's fault never leaks into the next. */
async function ensureHealthy(stack: ChaosStack): Promise<void> {
  if (stack.db.cluster && !stack.db.cluster.proc.alive) await stack.db.cluster.proc.start();
  if (!stack.temporal.alive) await stack.temporal.start();
  await stack.network.heal(); // no toxic left over, the proxies up
  for (const s of stack.services) if (!s.alive) await s.start();
  await stack.merchant.up(); // a merchant-down that was interrupted
  await waitUntil('sandbox', () => httpOk(`${stack.sandboxUrl}/healthz`), 60_000);
  await waitUntil('api', () => httpOk(`${stack.apiUrl}/healthz`), 60_000);
}

export async function runScenario(
  stack: ChaosStack,
  name: keyof typeof SCENARIO_TABLE,
  options: ChaosOptions,
  tag: string,
  signal: AbortSignal,
  log: (line: string) => void,
): Promise<ScenarioResult> {
  const scenario = SCENARIO_TABLE[name];
  const started = Date.now();
  const base = { scenario: name, fault: scenario.fault(options) };
  await ensureHealthy(stack);
  // Exits that happened between scenarios belong to nobody's fault; count them here.
  const earlier = collectExits(stack);

  if (name === 'pg-restart' && !stack.db.cluster) {
    const why = stack.db.whyShared ?? 'no private Postgres cluster';
    log(`${name}: SKIPPED (${why}; the shared server is never restarted)`);
    return {
      ...base,
      status: 'SKIP',
      note: why,
      counts: emptyCounts(),
      settledAfterSeconds: null,
      slowestOrderSeconds: null,
      seconds: 0,
      violations: [],
    };
  }

  const rng = seededRandom(options.seed * 1000 + Object.keys(SCENARIO_TABLE).indexOf(name));
  let clearedAt: number | undefined;
  const giveUpAt = () =>
    clearedAt === undefined ? Number.POSITIVE_INFINITY : clearedAt + options.settleSeconds * 1000;
  log(`${name}: ${base.fault}; ${options.orders} orders`);
  const accepted: AcceptedOrder[] = [];
  const replays: ReplayCheck[] = [];
  const ctx: FaultContext = {
    stack,
    options,
    rng,
    signal,
    log: (l) => log(`${name}: ${l}`),
    accepted,
    replays,
  };
  try {
    await scenario.prepare?.(ctx);
    return await faultAndVerdict();
  } finally {
    await scenario.cleanup?.(ctx).catch((err: unknown) => {
      log(`${name}: cleanup failed: ${err instanceof Error ? err.message : String(err)}`);
    });
  }

  async function faultAndVerdict(): Promise<ScenarioResult> {
    const probe = scenario.probe
      ? new FailFastProbe({
          apiUrl: stack.apiUrl,
          apiKey: TENANT_API_KEY,
          tag,
          scenario: name,
          accepted,
          signal,
          mustAccept: scenario.probe.mustAccept,
        })
      : undefined;
    probe?.start();
    const load = runLoad({
      apiUrl: stack.apiUrl,
      apiKey: TENANT_API_KEY,
      scenario: name,
      tag,
      orders: options.orders,
      concurrency: options.concurrency,
      spreadMs: Math.min(20_000, Math.max(5_000, scenario.activeMs(options) - 5_000)),
      giveUpAt,
      rng,
      signal,
      accepted,
    });
    let note: string;
    let faultError: string | undefined;
    let faultViolations: Violation[] = [];
    try {
      const outcome = await scenario.run(ctx);
      note = 'note' in outcome ? outcome.note : outcome.skipped;
      if ('violations' in outcome) faultViolations = outcome.violations ?? [];
    } catch (err) {
      faultError = err instanceof Error ? err.message : String(err);
      note = `fault step failed: ${faultError}`;
      log(`${name}: ${note}`);
    } finally {
      clearedAt = Date.now();
      await clearSandboxFaults(stack.sandboxUrl).catch(() => undefined);
      await stack.network.heal().catch(() => undefined); // a fault step that failed half-way
    }
    log(
      `${name}: fault cleared (${note}); waiting up to ${options.settleSeconds} s for every order to settle`,
    );
    // The probe goes on a little past the heal, then its unanswered creates are retried to an answer.
    const probed = probe
      ? (async () => {
          await sleep(PROBE_TAIL_MS, signal);
          await probe.stop();
          const { report, violations } = probe.verdict();
          log(
            `${name}: fail-fast probe: ${report.requests} requests, ${report.serverErrors} x 500, ` +
              `${report.slow} slower than ${report.boundMs / 1000} s, ${report.noAnswer} without an answer; ` +
              `max ${report.maxMs} ms, p99 ${report.p99Ms} ms`,
          );
          const probeRng = seededRandom(
            options.seed * 1000 + 500 + Object.keys(SCENARIO_TABLE).indexOf(name),
          );
          const submissions = await probe.submissions({ giveUpAt, rng: probeRng, signal });
          return { report, violations, submissions };
        })()
      : undefined;
    const { submissions, refunds, stats } = await load;
    const probeOutcome = await probed;
    if (probeOutcome) submissions.push(...probeOutcome.submissions);
    const deadline = clearedAt + options.settleSeconds * 1000;
    const settledAfterSeconds = await waitForSettlement(
      stack,
      submissions,
      refunds,
      clearedAt,
      deadline,
      signal,
    );
    const catchUpMs = scenario.catchUpMs?.(options) ?? DELIVERY_CATCH_UP_MS;
    log(`${name}: waiting up to ${catchUpMs / 1000} s for the merchant to have every settled order's event`);
    const deliveredAfterSeconds = await waitForDeliveries(stack, submissions, catchUpMs, signal);

    let verdict: Verdict;
    try {
      verdict = await judge(stack, submissions, refunds, replays, customerPrefix(tag, name));
    } catch (err) {
      // Facts that can't be read prove nothing either way: the scenario fails, and the run goes on.
      const detail = `could not read the facts: ${err instanceof Error ? err.message : String(err)}`;
      verdict = {
        violations: [{ kind: 'check_failed', subject: name, detail }],
        counts: { ...emptyCounts(), submitted: submissions.length },
        slowestSeconds: null,
      };
    }
    verdict.violations.unshift(
      ...earlier.map((v) => ({ ...v, detail: `${v.detail} (before this scenario)` })),
    );
    verdict.violations.push(...faultViolations, ...(probeOutcome?.violations ?? []));
    if (faultError !== undefined) {
      verdict.violations.push({ kind: 'restart_failed', subject: name, detail: faultError });
    }
    const status = verdict.violations.length === 0 ? 'PASS' : 'FAIL';
    const seconds = Math.round((Date.now() - started) / 1000);
    if (verdict.webhooks) {
      const w = verdict.webhooks;
      log(
        `${name}: merchant: ${w.events} events, ${w.redeliveries} redeliveries absorbed by its dedupe, ` +
          `${w.missing} missing` +
          (deliveredAfterSeconds === null ? '' : `; all in ${deliveredAfterSeconds} s after the settle wait`),
      );
    }
    log(`${name}: ${status} in ${seconds} s (${verdict.violations.length} violations)`);
    return {
      ...base,
      status,
      note,
      counts: { ...verdict.counts, refunds: refunds.reduce((n, r) => n + r.refundIds.length, 0) },
      settledAfterSeconds,
      slowestOrderSeconds: verdict.slowestSeconds,
      seconds,
      violations: verdict.violations,
      load: stats,
      ...(probeOutcome ? { probe: probeOutcome.report } : {}),
      ...(verdict.webhooks ? { webhooks: verdict.webhooks, deliveredAfterSeconds } : {}),
    };
  }
}

/**
 * Polls until the merchant's receiver has processed every settled order's terminal event and no
 * delivery row is left pending, or
 * `boundMs` passes. Returns the seconds it took, or null.
 */
async function waitForDeliveries(
  stack: ChaosStack,
  submissions: readonly Submission[],
  boundMs: number,
  signal: AbortSignal,
): Promise<number | null> {
  const ids = submissions.flatMap((s) => s.orderIds);
  const started = Date.now();
  for (;;) {
    try {
      const [orders, pending] = await withDb(
        stack.db.url,
        async (db) => [await readOrders(db, ids), await readPendingDeliveries(db, ids)] as const,
      );
      if (missingEvents(ids, orders, stack.merchant.deliveries).length === 0 && pending.length === 0) {
        return Math.round((Date.now() - started) / 1000);
      }
    } catch {
      /* the database may still be coming back */
    }
    if (Date.now() - started > boundMs || signal.aborted) return null;
    await sleep(1_000, signal);
  }
}

/** Polls until every accepted order and refund is settled, or the deadline passes. Returns seconds after `clearedAt`, or null. */
async function waitForSettlement(
  stack: ChaosStack,
  submissions: readonly Submission[],
  refundSubmissions: readonly RefundSubmission[],
  clearedAt: number,
  deadline: number,
  signal: AbortSignal,
): Promise<number | null> {
  const ids = submissions.flatMap((s) => s.orderIds);
  const refundIds = refundSubmissions.flatMap((r) => r.refundIds);
  for (;;) {
    try {
      const [orders, { refunds }] = await withDb(
        stack.db.url,
        async (db) => [await readOrders(db, ids), await readRefunds(db, refundIds, TENANT_ID)] as const,
      );
      if (
        ids.every((id) => settlementOf(orders.get(id)) !== 'stuck') &&
        refundIds.every((id) => REFUND_SETTLED.has(refunds.get(id)?.status ?? ''))
      ) {
        return Math.max(0, Math.round((Date.now() - clearedAt) / 1000));
      }
    } catch {
      /* the database may still be coming back */
    }
    if (Date.now() > deadline || signal.aborted) return null;
    await sleep(2_000, signal);
  }
}

async function judge(
  stack: ChaosStack,
  submissions: readonly Submission[],
  refundSubmissions: readonly RefundSubmission[],
  replays: readonly ReplayCheck[],
  prefix: string,
) {
  const ids = submissions.flatMap((s) => s.orderIds);
  const facts = await withDb(stack.db.url, async (db) => {
    const orders = await readOrders(db, ids);
    const workflowIds = [...orders.values()].map((o) => o.workflowId);
    const { refunds, receiptKeys } = await readRefunds(
      db,
      refundSubmissions.flatMap((r) => r.refundIds),
      TENANT_ID,
    );
    const money = await readMoney(db);
    return {
      orders,
      workflowIds,
      outbox: await readOutbox(db, workflowIds),
      pendingDeliveries: await readPendingDeliveries(db, ids),
      ordersForScenario: await readOrdersForCustomers(db, prefix),
      charges: money.charges,
      // Refund receipts name their order too; they are checked once per key, apart from order receipts.
      messages: money.messages.filter((m) => !receiptKeys.has(m.idempotencyKey)),
      refundReceipts: money.messages.filter((m) => receiptKeys.has(m.idempotencyKey)),
      refunds,
    };
  });
  const merchant = {
    deliveries: stack.merchant.deliveries,
    rejected: stack.merchant.takeRejected(),
    pending: facts.pendingDeliveries,
  };
  const providerRefunds = await readProviderRefunds(stack.sandboxUrl);
  const connection = await stack.temporalConnection();
  let workflows: Set<string>;
  try {
    workflows = await readWorkflows(connection, facts.workflowIds);
  } finally {
    await connection.close();
  }
  const processes = stack.services.map((s) => ({
    name: s.name,
    alive: s.alive,
    unexpectedExits: s.takeUnexpectedExits(),
  }));
  processes.push({
    name: 'temporal',
    alive: stack.temporal.alive,
    unexpectedExits: stack.temporal.takeUnexpectedExits(),
  });
  processes.push({
    name: 'toxiproxy',
    alive: stack.network.alive,
    unexpectedExits: stack.network.takeUnexpectedExits(),
  });
  if (stack.db.cluster) {
    const pgProc = stack.db.cluster.proc;
    processes.push({ name: 'postgres', alive: pgProc.alive, unexpectedExits: pgProc.takeUnexpectedExits() });
  }
  return checkScenario(
    submissions,
    { ...facts, workflows, processes, providerRefunds, merchant },
    refundSubmissions,
    replays,
  );
}

function collectExits(stack: ChaosStack): Violation[] {
  const procs: { name: string; takeUnexpectedExits(): string[] }[] = [
    ...stack.services,
    { name: 'temporal', takeUnexpectedExits: () => stack.temporal.takeUnexpectedExits() },
    { name: 'toxiproxy', takeUnexpectedExits: () => stack.network.takeUnexpectedExits() },
  ];
  return procs.flatMap((p) =>
    p.takeUnexpectedExits().map((exit) => ({
      kind: 'process_exited' as const,
      subject: p.name,
      detail: `exited on its own: ${exit}`,
    })),
  );
}
