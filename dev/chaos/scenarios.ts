/**
 * The fault matrix: one fault per scenario. A fault's `run` injects it and
 * returns once the fault has CLEARED (everything it killed is back); the
 * settle bound is measured from that moment.
 */
import type { ChaosOptions, ScenarioName } from './options.ts';
import type { ChaosStack } from './stack.ts';
import { terminateOwnBackends } from './facts.ts';
import { sleep } from './load.ts';

export interface FaultContext {
  stack: ChaosStack;
  options: ChaosOptions;
  rng: () => number;
  signal: AbortSignal;
  log: (line: string) => void;
}

type FaultResult = { note: string } | { skipped: string };

export interface Scenario {
  name: ScenarioName;
  /** One line for the table. */
  fault: (o: ChaosOptions) => string;
  /** How long the fault is active (to spread the orders over it). */
  activeMs: (o: ChaosOptions) => number;
  run: (ctx: FaultContext) => Promise<FaultResult>;
}

const between = (rng: () => number, lo: number, hi: number) => lo + rng() * (hi - lo);

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
};
