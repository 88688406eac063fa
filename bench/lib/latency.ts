/**
 * bench:e2e --latency pg=2,temporal=20: what a real network costs. The API's
 * and the workers' connections to Postgres and to the Temporal frontend go
 * through toxiproxy (dev/toxiproxy.ts, the chaos harness's network from
 * dev/chaos/network.ts); a `latency` toxic on each direction adds half the
 * round trip (toxiproxy delays each chunk by `latency` ms from its arrival, in
 * order, so up + down adds their sum to a request/response exchange). The
 * same stack runs with and without the toxics, in alternating halves, so
 * every ratio is measured in one run.
 *
 * Counting: Postgres round trips per order at the wire, by a counting relay
 * between toxiproxy and Postgres (pg-wire-counter.ts; pg_stat_statements
 * needs a restart of the shared server), and Temporal RPCs per order from the
 * dev server's own metrics (`service_requests` of the frontend, namespace
 * `default`, by operation). Postgres's minus the idle rate (the outbox
 * relay's poll) measured over a quiet window first.
 */
import pg from 'pg';
import { Connection } from '@temporalio/client';
import type { Toxic } from '../../dev/toxiproxy.ts';
import type { ChaosNetwork, ProxyName } from '../../dev/chaos/network.ts';
import { diffCounts, type PgWireCounter, type WireCounts } from './pg-wire-counter.ts';
import { percentile, round, type Say } from './stack.ts';

/** Added round-trip milliseconds per proxied dependency. */
export interface Latency {
  pg: number;
  temporal: number;
}

/** `pg=2,temporal=20` (round-trip ms added; either may be left out, meaning 0). Exits with code 2 on a bad value. */
export function parseLatency(raw: string): Latency {
  const out: Latency = { pg: 0, temporal: 0 };
  for (const pair of raw.split(',')) {
    const m = /^\s*(pg|postgres|temporal)\s*=\s*(\d+)\s*$/.exec(pair);
    if (!m || Number(m[2]) > 1000) {
      console.error(
        `--latency takes pg=<ms>,temporal=<ms> (added round trip, integers up to 1000), got ${JSON.stringify(raw)}`,
      );
      process.exit(2);
    }
    out[m[1] === 'temporal' ? 'temporal' : 'pg'] = Number(m[2]);
  }
  if (out.pg === 0 && out.temporal === 0) {
    console.error('--latency adds nothing: give pg=<ms> and/or temporal=<ms> above 0');
    process.exit(2);
  }
  return out;
}

/** The toxics adding `rttMs` to a round trip: half on each direction (the odd millisecond downstream). */
function latencyToxics(rttMs: number): Toxic[] {
  const up = Math.floor(rttMs / 2);
  return [
    { name: 'bench-latency-up', type: 'latency', stream: 'upstream', attributes: { latency: up, jitter: 0 } },
    {
      name: 'bench-latency-down',
      type: 'latency',
      stream: 'downstream',
      attributes: { latency: rttMs - up, jitter: 0 },
    },
  ];
}

/** Sets the toxics of both proxies to `want` (0: none), changing only what differs. */
class LatencySwitch {
  #current: Latency = { pg: 0, temporal: 0 };

  constructor(private readonly network: ChaosNetwork) {}

  async set(want: Latency): Promise<void> {
    for (const [key, proxy] of [
      ['pg', 'postgres'],
      ['temporal', 'temporal'],
    ] as [keyof Latency, ProxyName][]) {
      if (this.#current[key] === want[key]) continue;
      if (this.#current[key] > 0) {
        for (const t of latencyToxics(this.#current[key])) await this.network.removeToxic(proxy, t.name);
      }
      if (want[key] > 0) {
        for (const t of latencyToxics(want[key])) await this.network.addToxic(proxy, t);
      }
      this.#current = { ...this.#current, [key]: want[key] };
    }
  }
}

/**
 * The round trip as a client through the proxies sees it, median of `n`:
 * `select 1` on one open Postgres connection, and GetSystemInfo on one
 * Temporal connection (both tiny, so the added latency is most of it).
 */
async function measureRoundTrips(
  proxied: { databaseUrl: string; address: string },
  n = 40,
): Promise<{ pgMs: number; temporalMs: number }> {
  const time = async (fn: () => Promise<unknown>) => {
    for (let i = 0; i < 5; i++) await fn(); // connection set up, caches warm
    const ms: number[] = [];
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      await fn();
      ms.push(performance.now() - t0);
    }
    return round(
      percentile(
        ms.sort((a, b) => a - b),
        50,
      ),
      2,
    );
  };
  const client = new pg.Client({ connectionString: proxied.databaseUrl });
  await client.connect();
  let pgMs: number;
  try {
    pgMs = await time(() => client.query('select 1'));
  } finally {
    await client.end();
  }
  const connection = await Connection.connect({ address: proxied.address });
  try {
    const temporalMs = await time(() => connection.workflowService.getSystemInfo({}));
    return { pgMs, temporalMs };
  } finally {
    await connection.close();
  }
}

/** The dev server's frontend requests in namespace `default`, by operation (its Prometheus endpoint). */
async function temporalRequests(metricsUrl: string): Promise<Record<string, number>> {
  const res = await fetch(metricsUrl, { signal: AbortSignal.timeout(10_000) });
  if (!res.ok) throw new Error(`GET ${metricsUrl}: HTTP ${res.status}`);
  const out: Record<string, number> = {};
  for (const line of (await res.text()).split('\n')) {
    if (!line.startsWith('service_requests{')) continue;
    const labels = line.slice(line.indexOf('{') + 1, line.lastIndexOf('}'));
    if (!labels.includes('service_name="frontend"') || !labels.includes('namespace="default"')) continue;
    const op = /operation="([^"]+)"/.exec(labels)?.[1];
    if (op) out[op] = (out[op] ?? 0) + Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return out;
}

function diffRecord(later: Record<string, number>, earlier: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(later)) {
    const d = v - (earlier[k] ?? 0);
    if (d) out[k] = d;
  }
  return out;
}

/** Counts of Postgres round trips and Temporal RPCs over a stretch of time. */
interface Tally {
  seconds: number;
  pg: WireCounts;
  temporal: Record<string, number>;
}

/** Starts a tally; the returned function ends it. */
async function tally(counter: PgWireCounter, metricsUrl: string): Promise<() => Promise<Tally>> {
  const pg0 = counter.snapshot();
  const t0 = await temporalRequests(metricsUrl);
  const start = performance.now();
  return async () => {
    const seconds = (performance.now() - start) / 1000;
    const t1 = await temporalRequests(metricsUrl);
    return { seconds, pg: diffCounts(counter.snapshot(), pg0), temporal: diffRecord(t1, t0) };
  };
}

/** The sum of several tallies. */
function addTallies(parts: Tally[]): Tally {
  const sum = (records: Record<string, number>[]) => {
    const out: Record<string, number> = {};
    for (const r of records) for (const [k, v] of Object.entries(r)) out[k] = (out[k] ?? 0) + v;
    return out;
  };
  return {
    seconds: parts.reduce((s, p) => s + p.seconds, 0),
    pg: {
      roundTrips: parts.reduce((s, p) => s + p.pg.roundTrips, 0),
      readyForQuery: parts.reduce((s, p) => s + p.pg.readyForQuery, 0),
      notifications: parts.reduce((s, p) => s + p.pg.notifications, 0),
      connections: parts.reduce((s, p) => s + p.pg.connections, 0),
      byStatement: sum(parts.map((p) => p.pg.byStatement)),
    },
    temporal: sum(parts.map((p) => p.temporal)),
  };
}

/**
 * Per order: `t`'s counts divided by `orders`; for Postgres minus what
 * `idle` (a quiet window) would have counted over `t`'s seconds (the outbox
 * relay's steady poll). Entries under 0.05 per order are dropped.
 */
function perOrder(
  t: Tally,
  idle: Tally,
  orders: number,
): {
  pgRoundTrips: number;
  pgNotifications: number;
  pgByStatement: Record<string, number>;
  temporalRpcs: number;
  temporalByOperation: Record<string, number>;
} {
  const scale = t.seconds / Math.max(1e-9, idle.seconds);
  const net = (value: number, idleValue = 0) => (value - idleValue * scale) / orders;
  const table = (records: Record<string, number>, idleRecords: Record<string, number>) =>
    Object.fromEntries(
      Object.entries(records)
        .map(([k, v]) => [k, round(net(v, idleRecords[k]), 2)] as const)
        .filter(([, v]) => v >= 0.05)
        .sort((a, b) => b[1] - a[1]),
    );
  // Temporal's idle requests are sporadic (the retention schedule's and other workflows, not a
  // steady rate like the outbox relay's poll of Postgres): counted as they are, not subtracted.
  const temporalByOperation = table(t.temporal, {});
  return {
    pgRoundTrips: round(net(t.pg.roundTrips, idle.pg.roundTrips), 1),
    pgNotifications: round(net(t.pg.notifications, idle.pg.notifications), 2),
    pgByStatement: table(t.pg.byStatement, idle.pg.byStatement),
    temporalRpcs: round(
      Object.values(temporalByOperation).reduce((s, v) => s + v, 0),
      1,
    ),
    temporalByOperation,
  };
}

/** A printable one-line summary of the added latency. */
export function describeLatency(l: Latency): string {
  return (
    [l.pg ? `Postgres +${l.pg} ms` : '', l.temporal ? `Temporal +${l.temporal} ms` : '']
      .filter(Boolean)
      .join(', ') || 'none'
  );
}

/** A CPU meter as bench/lib/stack.ts's cpuMeter returns it. */
type CpuMeter = () => Promise<
  () => Promise<{ stack: number; postgres: number; byGroup: Record<string, number> }>
>;

interface LatencyRunOptions {
  say: Say;
  latency: Latency;
  network: ChaosNetwork;
  counter: PgWireCounter;
  /** The dev server's Prometheus endpoint. */
  metricsUrl: string;
  /** Where the services reach Postgres and Temporal (through the proxies). */
  proxied: { databaseUrl: string; address: string };
  /** One order, POST with Prefer: wait to its outcome; pushes its milliseconds, returns its status. */
  order: (latencies: number[]) => Promise<string>;
  closedLoop: (
    label: string,
    count: number,
    concurrency: number,
    job: () => Promise<void>,
  ) => Promise<number>;
  orderCpu: CpuMeter;
  /** Orders per configuration at C=1, and per side at the top concurrency. */
  c1Orders: number;
  topOrders: number;
  topConcurrency: number;
  idleSeconds: number;
}

const NONE: Latency = { pg: 0, temporal: 0 };

function stats(lat: number[]) {
  const s = [...lat].sort((a, b) => a - b);
  return {
    p50Ms: round(percentile(s, 50), 1),
    p90Ms: round(percentile(s, 90), 1),
    p99Ms: round(percentile(s, 99), 1),
    meanMs: round(s.reduce((a, b) => a + b, 0) / Math.max(1, s.length), 1),
  };
}

/**
 * The measurement: round trips through the proxies calibrated with and
 * without each toxic; an idle window; then at C=1 every configuration (none,
 * Postgres only, Temporal only, both) forward then backward in halves; then
 * at the top concurrency none and both in ABBA halves, with CPU per order.
 */
export async function runLatencyBench(o: LatencyRunOptions) {
  const { say, latency } = o;
  const sw = new LatencySwitch(o.network);
  const configs: { name: string; latency: Latency }[] = [
    { name: 'none', latency: NONE },
    ...(latency.pg > 0 && latency.temporal > 0
      ? [
          { name: 'pg', latency: { pg: latency.pg, temporal: 0 } },
          { name: 'temporal', latency: { pg: 0, temporal: latency.temporal } },
        ]
      : []),
    { name: 'both', latency },
  ];

  // The round trip each configuration really adds, as a client sees it through the proxies.
  const calibration: Record<string, { pgMs: number; temporalMs: number }> = {};
  for (const c of configs) {
    await sw.set(c.latency);
    calibration[c.name] = await measureRoundTrips(o.proxied);
    say(
      `round trip through the proxies with ${describeLatency(c.latency)}: Postgres ${calibration[c.name]!.pgMs} ms, ` +
        `Temporal ${calibration[c.name]!.temporalMs} ms`,
    );
  }
  await sw.set(NONE);
  const added = {
    pgMs: round((calibration.both?.pgMs ?? 0) - (calibration.none?.pgMs ?? 0), 2),
    temporalMs: round((calibration.both?.temporalMs ?? 0) - (calibration.none?.temporalMs ?? 0), 2),
  };

  say('warm-up: 16 orders at C=4, 8 at C=1, without added latency');
  await o.closedLoop('warm-up', 16, 4, async () => void (await o.order([])));
  await o.closedLoop('warm-up', 8, 1, async () => void (await o.order([])));

  say(`idle window: ${o.idleSeconds} s without orders (background round trips, subtracted below)`);
  const idleEnd = await tally(o.counter, o.metricsUrl);
  await new Promise((r) => setTimeout(r, o.idleSeconds * 1000));
  const idle = await idleEnd();
  say(
    `  idle: ${round(idle.pg.roundTrips / idle.seconds, 2)} Postgres round trips/s, ` +
      `${round(Object.values(idle.temporal).reduce((a, b) => a + b, 0) / idle.seconds, 2)} Temporal RPCs/s`,
  );

  // C=1: each configuration in two halves, forward then backward (none, pg, temporal, both, both, temporal, pg, none).
  const c1 = new Map(
    configs.map((c) => [c.name, { lat: [] as number[], tallies: [] as Tally[], notCompleted: 0 }]),
  );
  const halves = [Math.ceil(o.c1Orders / 2), Math.floor(o.c1Orders / 2)];
  for (const [half, order] of [
    [0, configs],
    [1, [...configs].reverse()],
  ] as const) {
    for (const c of order) {
      const into = c1.get(c.name)!;
      await sw.set(c.latency);
      const end = await tally(o.counter, o.metricsUrl);
      await o.closedLoop(`C=1, ${c.name} (half ${half + 1})`, halves[half]!, 1, async () => {
        if ((await o.order(into.lat)) !== 'completed') into.notCompleted++;
      });
      into.tallies.push(await end());
    }
  }
  await sw.set(NONE);
  const c1Results = Object.fromEntries(
    configs.map((c) => {
      const r = c1.get(c.name)!;
      return [
        c.name,
        {
          latency: c.latency,
          orders: r.lat.length,
          notCompleted: r.notCompleted,
          ...stats(r.lat),
          perOrder: perOrder(addTallies(r.tallies), idle, r.lat.length),
        },
      ];
    }),
  );
  for (const c of configs) {
    const r = c1Results[c.name]!;
    say(
      `C=1 ${c.name}: p50 ${r.p50Ms} ms, p99 ${r.p99Ms} ms, mean ${r.meanMs} ms; per order ` +
        `${r.perOrder.pgRoundTrips} Postgres round trips, ${r.perOrder.temporalRpcs} Temporal RPCs`,
    );
  }
  // Round trips on the order's critical path: the time a dimension's latency added, over its round trip.
  const critical = (name: 'pg' | 'temporal', rtt: number) => {
    const r = c1Results[name] ?? (configs.length === 2 && latency[name] > 0 ? c1Results.both : undefined);
    const none = c1Results.none!;
    if (!r || rtt <= 0) return null;
    return {
      addedRoundTripMs: rtt,
      fromP50: round((r.p50Ms - none.p50Ms) / rtt, 1),
      fromMean: round((r.meanMs - none.meanMs) / rtt, 1),
    };
  };
  const criticalPath = {
    pg: critical('pg', round((calibration.pg ?? calibration.both)!.pgMs - calibration.none!.pgMs, 2)),
    temporal: critical(
      'temporal',
      round((calibration.temporal ?? calibration.both)!.temporalMs - calibration.none!.temporalMs, 2),
    ),
  };
  say(
    `sequential round trips on an order's path at C=1 (added time / added round trip, p50; mean): ` +
      `Postgres ${criticalPath.pg?.fromP50 ?? '-'}; ${criticalPath.pg?.fromMean ?? '-'}, ` +
      `Temporal ${criticalPath.temporal?.fromP50 ?? '-'}; ${criticalPath.temporal?.fromMean ?? '-'}`,
  );

  // The top concurrency: none and both in ABBA halves.
  const top = {
    none: {
      lat: [] as number[],
      secs: 0,
      notCompleted: 0,
      cpu: [] as { stack: number; postgres: number; byGroup: Record<string, number> }[],
    },
    both: {
      lat: [] as number[],
      secs: 0,
      notCompleted: 0,
      cpu: [] as { stack: number; postgres: number; byGroup: Record<string, number> }[],
    },
  };
  const topHalves = [Math.ceil(o.topOrders / 2), Math.floor(o.topOrders / 2)];
  const C = o.topConcurrency;
  for (const [name, half] of [
    ['none', 0],
    ['both', 0],
    ['both', 1],
    ['none', 1],
  ] as const) {
    const into = top[name];
    await sw.set(name === 'none' ? NONE : latency);
    const stop = await o.orderCpu();
    into.secs += await o.closedLoop(`C=${C}, ${name} (half ${half + 1})`, topHalves[half]!, C, async () => {
      if ((await o.order(into.lat)) !== 'completed') into.notCompleted++;
    });
    into.cpu.push(await stop());
  }
  await sw.set(NONE);
  const topResult = (name: 'none' | 'both') => {
    const r = top[name];
    const n = r.lat.length;
    const byGroup: Record<string, number> = {};
    for (const part of r.cpu)
      for (const [k, v] of Object.entries(part.byGroup)) byGroup[k] = (byGroup[k] ?? 0) + v;
    return {
      orders: n,
      notCompleted: r.notCompleted,
      ordersPerSec: round(n / r.secs, 2),
      ...stats(r.lat),
      cpuPerOrderSec: round(r.cpu.reduce((s, p) => s + p.stack, 0) / n, 4),
      postgresCpuPerOrderSec: round(r.cpu.reduce((s, p) => s + p.postgres, 0) / n, 4),
      cpuPerOrderByProcessSec: Object.fromEntries(
        Object.entries(byGroup).map(([k, v]) => [k, round(v / n, 4)]),
      ),
    };
  };
  const topNone = topResult('none');
  const topBoth = topResult('both');
  const throughputRatio = round(topBoth.ordersPerSec / topNone.ordersPerSec, 3);
  say(
    `C=${C}: without ${topNone.ordersPerSec} orders/s (p50 ${topNone.p50Ms}, p99 ${topNone.p99Ms} ms), ` +
      `with ${describeLatency(latency)} ${topBoth.ordersPerSec} orders/s (p50 ${topBoth.p50Ms}, p99 ${topBoth.p99Ms} ms): ratio ${throughputRatio}`,
  );

  return {
    calibration: { ...calibration, added },
    idle: {
      seconds: round(idle.seconds, 1),
      pgRoundTripsPerSec: round(idle.pg.roundTrips / idle.seconds, 2),
      temporalRpcsPerSec: round(Object.values(idle.temporal).reduce((a, b) => a + b, 0) / idle.seconds, 2),
      pgByStatement: idle.pg.byStatement,
      temporalByOperation: idle.temporal,
    },
    c1: c1Results,
    criticalPathRoundTripsAtC1: criticalPath,
    [`c${C}`]: { without: topNone, with: topBoth, ordersPerSecRatio: throughputRatio },
  };
}
