/**
 * The fault matrix: one fault per scenario. A fault's `run` injects it and
 * returns once the fault has CLEARED (everything it killed is back); the
 * settle bound is measured from that moment.
 */
import fs from 'node:fs';
import path from 'node:path';
import { RESTORE_KEY_WINDOW_MS, type ChaosOptions, type ScenarioName } from './options.ts';
import type { ChaosStack } from './stack.ts';
import { terminateOwnBackends, withDb } from './facts.ts';
import { selectPendingRestoreRecovery } from './sql.ts';
import type { ReplayCheck, Violation } from './invariants.ts';
import { sleep, type AcceptedOrder } from './load.ts';
import { blackholeToxics, type ProxyName } from './network.ts';
import type { Toxic } from '../toxiproxy.ts';
import {
  clearStoppedConnections,
  dumpDatabase,
  replayAccepted,
  restoreDatabase,
  runRecovery,
} from './restore.ts';

export interface FaultContext {
  stack: ChaosStack;
  options: ChaosOptions;
  rng: () => number;
  signal: AbortSignal;
  log: (line: string) => void;
  /** The load's 202s, as they arrive (the restore drill replays them). */
  accepted: readonly AcceptedOrder[];
  /** Where a fault puts the client retries it made, for the verdict. */
  replays: ReplayCheck[];
}

/** `violations`: what the fault step itself saw go wrong (e.g. a recovery command that failed). */
type FaultResult = { note: string; violations?: Violation[] } | { skipped: string };

export interface Scenario {
  name: ScenarioName;
  /** One line for the table. */
  fault: (o: ChaosOptions) => string;
  /** How long the fault is active (to spread the orders over it). */
  activeMs: (o: ChaosOptions) => number;
  run: (ctx: FaultContext) => Promise<FaultResult>;
  /** Before the load starts: a stack setting the fault needs (undone by `cleanup`). */
  prepare?: (ctx: FaultContext) => Promise<void>;
  /** After the verdict: the stack as the other scenarios expect it. */
  cleanup?: (ctx: FaultContext) => Promise<void>;
  /**
   * Run the fail-fast probe (probe.ts) beside the load, from the start until a
   * few seconds after the fault cleared. `mustAccept`: every create it gets an
   * answer to must be a 202 (only Temporal is cut off: the outbox holds the orders).
   */
  probe?: { mustAccept: boolean };
  /**
   * How long after the settle wait the merchant's deliveries may take to catch up (default
   * DELIVERY_CATCH_UP_MS): a fault of the receiver itself stretches the deliveries' backoff.
   */
  catchUpMs?: (o: ChaosOptions) => number;
}

/**
 * After the orders settled, the merchant's receiver must have every terminal order's event within
 * this: a first retry of 1 s (stack.ts) doubles past 30 s only after a minute of failed attempts.
 */
export const DELIVERY_CATCH_UP_MS = 60_000;
/** merchant-down: how long the receiver refuses connections, under load. */
const MERCHANT_DOWN_MS = 120_000;

/** restore: orders flow this long before the dump, so the backup holds settled and in-flight orders. */
const RESTORE_LEAD_MS = 5_000;
/**
 * restore: provider calls made in the last seconds before the stop are held
 * this long: longer than the lead plus a worker's stop grace (5 s), so the
 * worker is gone before its answer, and shorter than the provider client's
 * 10 s timeout.
 */
const MID_FLIGHT_LEAD_MS = 3_000;
const MID_FLIGHT_DELAY_MS = 9_000;

const between = (rng: () => number, lo: number, hi: number) => lo + rng() * (hi - lo);

/** pg-blackhole, temporal-blackhole: how long the proxy passes nothing. */
const BLACKHOLE_MS = 30_000;
/** Before a network fault: the load and the probe meet a healthy stack first. */
const NETWORK_LEAD_MS = 3_000;
/** network-latency: added to each chunk of the answers (downstream), uniformly within ± the jitter. */
const LATENCY: Readonly<Record<ProxyName, { latency: number; jitter: number }>> = {
  temporal: { latency: 20, jitter: 10 },
  postgres: { latency: 2, jitter: 1 },
};
/** connection-reset: each round resets every Postgres connection that sends for this long. */
const RESET_MS = 4_000;
const RESET_GAP_MS = 8_000;

/**
 * Adds `toxics` to `proxy`, waits `ms`, and removes those it added (even when
 * interrupted or when adding one failed). Returns when the proxy is clean again.
 */
async function withToxics(
  ctx: FaultContext,
  proxy: ProxyName,
  toxics: readonly Toxic[],
  ms: number,
): Promise<void> {
  const added: string[] = [];
  try {
    for (const toxic of toxics) {
      await ctx.stack.network.addToxic(proxy, toxic);
      added.push(toxic.name);
    }
    await sleep(ms, ctx.signal);
  } finally {
    for (const name of added) await ctx.stack.network.removeToxic(proxy, name);
  }
}

/** pg-blackhole and temporal-blackhole: nothing passes the proxy for BLACKHOLE_MS, under load. */
async function blackhole(ctx: FaultContext, proxy: ProxyName): Promise<FaultResult> {
  const t0 = Date.now();
  await sleep(NETWORK_LEAD_MS, ctx.signal);
  const from = Date.now() - t0;
  ctx.log(`the ${proxy} proxy passes nothing from now on, for ${BLACKHOLE_MS / 1000} s`);
  await withToxics(ctx, proxy, blackholeToxics(`${proxy}-blackhole`), BLACKHOLE_MS);
  const to = Date.now() - t0;
  ctx.log(`the ${proxy} proxy passes again (the connections it held are closed)`);
  return {
    note: `${proxy} blackholed from +${seconds(from)} to +${seconds(to)}; the connections it held closed at the heal`,
  };
}

async function sandboxFault(
  ctx: FaultContext,
  f: { endpoint: string; kind: string; count: number; delayMs?: number },
): Promise<void> {
  const res = await fetch(`${ctx.stack.sandboxUrl}/_sandbox/faults`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(f),
    signal: AbortSignal.timeout(5_000),
  });
  await res.body?.cancel();
  if (!res.ok) throw new Error(`injecting a sandbox fault failed: HTTP ${res.status}`);
}

export async function clearSandboxFaults(sandboxUrl: string): Promise<void> {
  const res = await fetch(`${sandboxUrl}/_sandbox/faults`, {
    method: 'DELETE',
    signal: AbortSignal.timeout(5_000),
  });
  await res.body?.cancel();
}

export const SCENARIO_TABLE: Record<ScenarioName, Scenario> = {
  'worker-kill': {
    name: 'worker-kill',
    fault: (o) => `kill -9 a worker every ~10 s for ${o.faultSeconds} s (two workers, alternating)`,
    activeMs: (o) => o.faultSeconds * 1000,
    async run(ctx) {
      const end = Date.now() + ctx.options.faultSeconds * 1000;
      let kills = 0;
      while (Date.now() < end && !ctx.signal.aborted) {
        const worker = ctx.stack.workers[kills % ctx.stack.workers.length]!;
        await worker.kill9();
        kills++;
        await sleep(between(ctx.rng, 1_000, 3_000), ctx.signal);
        await worker.start();
        await sleep(between(ctx.rng, 6_000, 10_000), ctx.signal);
      }
      return { note: `${kills} worker kills` };
    },
  },
  'api-kill': {
    name: 'api-kill',
    fault: (o) => `kill -9 the API every ~12 s for ${o.faultSeconds} s, restarted 2 s later`,
    activeMs: (o) => o.faultSeconds * 1000,
    async run(ctx) {
      const end = Date.now() + ctx.options.faultSeconds * 1000;
      let kills = 0;
      while (Date.now() < end && !ctx.signal.aborted) {
        await sleep(between(ctx.rng, 2_000, 6_000), ctx.signal);
        await ctx.stack.api.kill9();
        kills++;
        await sleep(2_000, ctx.signal);
        await ctx.stack.api.start();
        await sleep(between(ctx.rng, 4_000, 8_000), ctx.signal);
      }
      return { note: `${kills} API kills` };
    },
  },
  'pg-terminate': {
    name: 'pg-terminate',
    fault: (o) => `pg_terminate_backend of the run database's connections every ~5 s for ${o.faultSeconds} s`,
    activeMs: (o) => o.faultSeconds * 1000,
    async run(ctx) {
      const end = Date.now() + ctx.options.faultSeconds * 1000;
      let rounds = 0;
      let terminated = 0;
      while (Date.now() < end && !ctx.signal.aborted) {
        await sleep(between(ctx.rng, 3_000, 7_000), ctx.signal);
        terminated += await terminateOwnBackends(ctx.stack.db.adminUrl, ctx.stack.db.databaseName);
        rounds++;
      }
      return { note: `${rounds} rounds, ${terminated} connections terminated` };
    },
  },
  'pg-restart': {
    name: 'pg-restart',
    fault: () => 'Postgres fast shutdown, down 5 s, started again (private cluster), twice',
    activeMs: () => 25_000,
    async run(ctx) {
      const cluster = ctx.stack.db.cluster;
      if (!cluster) return { skipped: ctx.stack.db.whyShared ?? 'no private cluster' };
      for (let i = 0; i < 2 && !ctx.signal.aborted; i++) {
        await sleep(3_000, ctx.signal);
        await cluster.restart(5_000);
        await sleep(5_000, ctx.signal);
      }
      return { note: `2 restarts of the private cluster on port ${cluster.port}` };
    },
  },
  'temporal-kill': {
    name: 'temporal-kill',
    fault: () => 'kill -9 the Temporal dev server, down 5 s, restarted on the same SQLite file',
    activeMs: () => 15_000,
    async run(ctx) {
      await sleep(3_000, ctx.signal);
      await ctx.stack.temporal.kill9();
      await sleep(5_000, ctx.signal);
      await ctx.stack.temporal.start();
      return { note: `restarted on ${ctx.stack.temporal.address}` };
    },
  },
  'provider-outage': {
    name: 'provider-outage',
    fault: (o) => `kill -9 the sandbox provider, down ${o.outageSeconds} s, restarted on the same port`,
    activeMs: (o) => o.outageSeconds * 1000,
    async run(ctx) {
      await sleep(2_000, ctx.signal);
      await ctx.stack.sandbox.kill9();
      await sleep(ctx.options.outageSeconds * 1000, ctx.signal);
      await ctx.stack.sandbox.start();
      return { note: `down ${ctx.options.outageSeconds} s` };
    },
  },
  'provider-faults': {
    name: 'provider-faults',
    fault: (o) =>
      `rolling sandbox faults on charges, messages and refunds (fail_before, fail_after, drop_after, delay past the client timeout) for ${o.faultSeconds} s`,
    activeMs: (o) => o.faultSeconds * 1000,
    async run(ctx) {
      const end = Date.now() + ctx.options.faultSeconds * 1000;
      const endpoints = [
        'charges.create',
        'charges.create',
        'charges.lookup',
        'messages.create',
        'messages.lookup',
        'refunds.create',
        'refunds.lookup',
      ];
      const kinds = ['fail_before', 'fail_after', 'drop_after', 'delay'];
      let injected = 0;
      while (Date.now() < end && !ctx.signal.aborted) {
        const endpoint = endpoints[Math.floor(ctx.rng() * endpoints.length)]!;
        const kind = kinds[Math.floor(ctx.rng() * kinds.length)]!;
        // A delay is either short (a slow provider) or longer than the client's 10 s timeout (a lost response).
        const delayMs = kind === 'delay' ? (ctx.rng() < 0.5 ? 1_500 : 12_000) : undefined;
        await sandboxFault(ctx, {
          endpoint,
          kind,
          count: 1 + Math.floor(ctx.rng() * 3),
          ...(delayMs !== undefined ? { delayMs } : {}),
        });
        injected++;
        await sleep(between(ctx.rng, 1_500, 3_500), ctx.signal);
      }
      await clearSandboxFaults(ctx.stack.sandboxUrl);
      return { note: `${injected} faults injected` };
    },
  },
  restore: {
    name: 'restore',
    fault: (o) =>
      `pg_dump while orders flow (T0), ${o.restoreGapSeconds} s more orders, API and workers stopped, ` +
      `pg_restore into the same database, ${o.skipRecovery ? 'NO recovery (--skip-recovery)' : 'ops recover-after-restore --since T0'}, ` +
      `restarted; every client that saw a 202 retries it; sandbox key window ${RESTORE_KEY_WINDOW_MS / 1000} s`,
    // Orders are still released after the stop, so some clients retry through the outage.
    activeMs: (o) => RESTORE_LEAD_MS + o.restoreGapSeconds * 1000 + 10_000,
    prepare: (ctx) => ctx.stack.restartSandbox({ SANDBOX_KEY_WINDOW_MS: String(RESTORE_KEY_WINDOW_MS) }),
    cleanup: (ctx) => ctx.stack.restartSandbox({ SANDBOX_KEY_WINDOW_MS: undefined }),
    run: restoreDrill,
  },
  'pg-blackhole': {
    name: 'pg-blackhole',
    fault: () =>
      `nothing passes the Postgres proxy (toxiproxy timeout=0, both directions) for ${BLACKHOLE_MS / 1000} s; fail-fast probe`,
    activeMs: () => NETWORK_LEAD_MS + BLACKHOLE_MS,
    probe: { mustAccept: false },
    run: (ctx) => blackhole(ctx, 'postgres'),
  },
  'temporal-blackhole': {
    name: 'temporal-blackhole',
    fault: () =>
      `nothing passes the Temporal proxy (toxiproxy timeout=0, both directions) for ${BLACKHOLE_MS / 1000} s; ` +
      'fail-fast probe, every create accepted',
    activeMs: () => NETWORK_LEAD_MS + BLACKHOLE_MS,
    probe: { mustAccept: true },
    run: (ctx) => blackhole(ctx, 'temporal'),
  },
  'network-latency': {
    name: 'network-latency',
    fault: (o) =>
      `answers delayed for ${o.faultSeconds} s (toxiproxy latency): Temporal ` +
      `${LATENCY.temporal.latency} ± ${LATENCY.temporal.jitter} ms, Postgres ${LATENCY.postgres.latency} ± ${LATENCY.postgres.jitter} ms`,
    activeMs: (o) => o.faultSeconds * 1000,
    async run(ctx) {
      const ms = ctx.options.faultSeconds * 1000;
      await Promise.all(
        (Object.keys(LATENCY) as ProxyName[]).map((proxy) =>
          withToxics(
            ctx,
            proxy,
            [{ name: `${proxy}-latency`, type: 'latency', stream: 'downstream', attributes: LATENCY[proxy] }],
            ms,
          ),
        ),
      );
      return { note: `${ctx.options.faultSeconds} s of latency on both proxies` };
    },
  },
  'connection-reset': {
    name: 'connection-reset',
    fault: () =>
      `every Postgres connection that sends is reset (toxiproxy reset_peer) for ${RESET_MS / 1000} s, twice ` +
      `${RESET_GAP_MS / 1000} s apart: first as a request goes out, then as its answer comes back`,
    activeMs: () => NETWORK_LEAD_MS + RESET_MS * 2 + RESET_GAP_MS,
    async run(ctx) {
      // Upstream: a statement is reset before Postgres sees it. Downstream: after Postgres ran it (a
      // COMMIT whose answer is lost), which only an idempotent retry survives.
      const rounds = ['upstream', 'downstream'] as const;
      let done = 0;
      for (const stream of rounds) {
        if (ctx.signal.aborted) break;
        await sleep(done === 0 ? NETWORK_LEAD_MS : RESET_GAP_MS, ctx.signal);
        ctx.log(`resetting every Postgres connection that sends (${stream}) for ${RESET_MS / 1000} s`);
        await withToxics(
          ctx,
          'postgres',
          [{ name: `postgres-reset-${stream}`, type: 'reset_peer', stream, attributes: { timeout: 0 } }],
          RESET_MS,
        );
        done++;
      }
      return { note: `${done} rounds of resets (${rounds.slice(0, done).join(', then ')})` };
    },
  },
  'merchant-down': {
    name: 'merchant-down',
    fault: () =>
      `the merchant's webhook receiver down (its port refusing) for ${MERCHANT_DOWN_MS / 1000} s under load, then back on the same port`,
    activeMs: () => MERCHANT_DOWN_MS,
    // A delivery failing for the whole outage has doubled its backoff to about the outage's length.
    catchUpMs: () => DELIVERY_CATCH_UP_MS + MERCHANT_DOWN_MS,
    async run(ctx) {
      await sleep(2_000, ctx.signal);
      await ctx.stack.merchant.down();
      try {
        await sleep(MERCHANT_DOWN_MS, ctx.signal);
      } finally {
        await ctx.stack.merchant.up();
      }
      return {
        note: `down ${MERCHANT_DOWN_MS / 1000} s, back on port ${ctx.stack.merchant.port}`,
      };
    },
  },
};

/** The restore drill (./restore.ts has the why and the steps' tools). */
async function restoreDrill(ctx: FaultContext): Promise<FaultResult> {
  const { stack, options, log } = ctx;
  const violations: Violation[] = [];
  await sleep(RESTORE_LEAD_MS, ctx.signal);
  if (ctx.signal.aborted) return { note: 'interrupted before the dump' };

  const file = path.join(stack.opts.runDir, 'restore-drill.dump');
  const t0 = new Date();
  log(
    `T0 = ${t0.toISOString()}: pg_dump of ${stack.db.databaseName} (the sandbox provider's schema left out: a provider keeps its charges)`,
  );
  await dumpDatabase(stack.db, file, log);
  log(
    `dump done in ${seconds(Date.now() - t0.getTime())} (${fs.statSync(file).size} bytes); orders keep flowing until T0 + ${options.restoreGapSeconds} s`,
  );
  const stopAt = t0.getTime() + options.restoreGapSeconds * 1000;
  await sleep(Math.max(0, stopAt - MID_FLIGHT_LEAD_MS - Date.now()), ctx.signal);
  // Steps finish in milliseconds here: held at the provider past the stop, a few orders are
  // mid-flight when the workers go (a charge or a receipt that lands after they left).
  for (const endpoint of ['charges.create', 'messages.create']) {
    await sandboxFault(ctx, { endpoint, kind: 'delay', count: 2, delayMs: MID_FLIGHT_DELAY_MS });
  }
  log(
    `the next 2 charges and 2 receipts are held ${MID_FLIGHT_DELAY_MS / 1000} s at the provider, past the stop`,
  );
  await sleep(Math.max(0, stopAt - Date.now()), ctx.signal);
  // Interrupted: the harness is stopping everything anyway; no restore over its shoulder.
  if (ctx.signal.aborted) {
    fs.rmSync(file, { force: true });
    return { note: 'interrupted before the restore' };
  }

  const afterT0 = () => ctx.accepted.filter((a) => a.at >= t0.getTime()).length;
  log(
    `stopping the API and the workers (${ctx.accepted.length} orders accepted so far, ${afterT0()} after T0)`,
  );
  await Promise.all([stack.api, ...stack.workers].map((s) => s.stop()));
  const stoppedAt = Date.now();
  let recovery = options.skipRecovery ? 'skipped (--skip-recovery)' : 'not run';
  try {
    const terminated = await clearStoppedConnections(stack.db);
    if (terminated) log(`terminated ${terminated} leftover connections of the stopped processes`);
    const restoreStarted = Date.now();
    await restoreDatabase(stack.db, file, log);
    log(`pg_restore done in ${seconds(Date.now() - restoreStarted)}: the database is back at T0`);
    if (options.skipRecovery) {
      log(
        '--skip-recovery: NOT running recover-after-restore; the orders accepted after T0 are gone from the database',
      );
    } else {
      const recoveryStarted = Date.now();
      log(`running ops recover-after-restore --since ${t0.toISOString()}`);
      try {
        await runRecovery(stack, t0, options.settleSeconds * 1000, log);
        recovery = `done in ${seconds(Date.now() - recoveryStarted)}`;
      } catch (err) {
        recovery = 'FAILED';
        const detail = err instanceof Error ? err.message : String(err);
        violations.push({ kind: 'recovery_failed', subject: 'recover-after-restore', detail });
        log(`recover-after-restore failed: ${detail}`);
      }
    }
  } finally {
    fs.rmSync(file, { force: true });
    // Whatever a stopped worker charged is past the provider's key window before anything runs again.
    await sleep(Math.max(0, stoppedAt + RESTORE_KEY_WINDOW_MS - Date.now()), ctx.signal);
    // --skip-recovery shows what a restore without recovery does, so the processes must not see it
    // either: with detection on they close the restore gate themselves (and hold all new work).
    for (const p of [stack.api, ...stack.workers]) {
      if (options.skipRecovery) p.spec.env.RESTORE_DETECTION = 'off';
      else delete p.spec.env.RESTORE_DETECTION;
    }
    await Promise.all(stack.workers.map((w) => w.start()));
    await stack.api.start();
    log(`API and workers started again, ${seconds(Date.now() - stoppedAt)} after the stop`);
  }
  const gate = await withDb(stack.db.url, selectPendingRestoreRecovery);
  if (gate !== null) {
    // The processes found orders Temporal has and the database lacks: they hold all new work.
    log(
      `the restore gate is closed (declared by ${gate}): creates answer 503 and workers wait for a recovery`,
    );
  }

  const toReplay = ctx.accepted.filter((a) => a.at <= stoppedAt);
  log(
    `every client that saw a 202 (${toReplay.length}, ${afterT0()} after T0) sends its POST again under its original key`,
  );
  const replays = await replayAccepted(stack, toReplay, t0.getTime(), {
    giveUpAt: Date.now() + options.settleSeconds * 1000,
    rng: ctx.rng,
    signal: ctx.signal,
  });
  ctx.replays.push(...replays);
  const original = replays.filter(
    (r) =>
      r.replay.kind === 'answer' &&
      r.replay.replayed &&
      (r.replay.body as { id?: unknown } | null)?.id === r.original.orderId,
  ).length;
  return {
    note:
      `T0 ${t0.toISOString()}, ${afterT0()} orders accepted after T0, recovery ${recovery}, ` +
      (gate !== null ? 'restore gate still closed, ' : '') +
      `${original}/${replays.length} client retries replayed the original order`,
    violations,
  };
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
