/**
 * The host probe's child (bench/lib/host-probe.ts): times one fixed unit of
 * JavaScript work every `--interval-ms` in this process's CPU time, and
 * prints one JSON line per sample on stdout.
 *
 * The unit does what the stack's Node processes do most (small objects, JSON
 * in and out, a collector behind them). Its size is fixed once, at start, to
 * about `--unit-ms` of CPU, so that every later sample does the same work.
 */
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: {
    'interval-ms': { type: 'string', default: '250' },
    'unit-ms': { type: 'string', default: '10' },
  },
});
const intervalMs = Number(values['interval-ms']);
const unitMs = Number(values['unit-ms']);
if (!(intervalMs > 0) || !(unitMs > 0)) {
  console.error(`host probe: --interval-ms and --unit-ms must be positive (got ${intervalMs}, ${unitMs})`);
  process.exit(2);
}

let sink = 0;
function unit(n: number): void {
  let h = 0;
  for (let i = 0; i < n; i++) {
    const text = JSON.stringify({ i, id: `order-${i}`, amount: i * 7, items: [i, i + 1, i + 2] });
    const back = JSON.parse(text) as { i: number; items: number[] };
    h = (h * 31 + text.length + back.i + (back.items[2] ?? 0)) | 0;
  }
  // Kept, so that the work cannot be optimised away.
  sink ^= h;
}

function cpuMsOf(f: () => void): number {
  const c0 = process.cpuUsage();
  f();
  const c = process.cpuUsage(c0);
  return (c.user + c.system) / 1000;
}

// Warm the JIT for half a second, then size the unit: the fastest of five runs of n, scaled to unitMs.
const warmUntil = performance.now() + 500;
while (performance.now() < warmUntil) unit(1000);
const probeN = 2000;
const fastest = Math.min(...Array.from({ length: 5 }, () => cpuMsOf(() => unit(probeN))));
const n = Math.max(1, Math.round((probeN * unitMs) / Math.max(fastest, 0.01)));
console.log(JSON.stringify({ unitSize: n }));

const tick = (): void => {
  console.log(JSON.stringify({ cpuMs: cpuMsOf(() => unit(n)), sink: sink & 1 }));
  setTimeout(tick, intervalMs);
};
setTimeout(tick, intervalMs);
