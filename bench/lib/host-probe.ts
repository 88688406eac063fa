/**
 * A baseline in the same run for benchmarks long enough that the shared host
 * changes under them (the soak of bench/growth.ts: eleven minutes, over which
 * round 12 saw every process's CPU per order fall by the same 15 %).
 *
 * Each `take()` reports, since the last one:
 * - `cpuMsPerUnit`: the mean CPU time of one fixed unit of JavaScript work,
 *   timed every 250 ms by a child process (host-probe-child.ts): how fast
 *   the host's CPU-seconds are. A busy neighbour on the host's core, a lower
 *   clock or a colder cache raise it. The mean, not the median: one unit's
 *   time is bimodal (about 13 or 20 ms in round 13, by what ran beside it),
 *   and the median jumps between the modes where the mean follows their mix,
 *   as the stack's own CPU per order does. The probe's CPU time is its own,
 *   so the stack's load moves it little; a stack that gets slower per order
 *   does not make the probe slower, so dividing by it does not hide that.
 * - `idlePct` and `stealPct`, from /proc/stat: the share of the machine's
 *   CPU time that was idle (iowait included), and that the hypervisor gave
 *   to other guests. A closed loop at C=32 keeps idle near zero; where it is
 *   not, orders/s is not CPU-bound and CPU per order does not explain it.
 * What the probe cannot see is how much CPU other processes took from the
 * stack: it sleeps between units, and a sleeper is scheduled at once on
 * waking (round 13 in the journal: a busy process that cut orders/s by a
 * quarter left its wall time unchanged). The stack's own CPU per order
 * (cpuMeter) is the measure for that. The probe costs about 4 % of one core,
 * the same in every tenth.
 */
import fs from 'node:fs';
import path from 'node:path';
import { round, type BenchProcesses, type Say } from './stack.ts';

export interface HostProbeReading {
  samples: number;
  cpuMsPerUnit: number;
  idlePct: number;
  stealPct: number;
}

/** The machine's CPU time so far, from the first line of /proc/stat (in ticks). */
function machineTicks(): { total: number; idle: number; steal: number } {
  try {
    const line = fs.readFileSync('/proc/stat', 'utf8').split('\n', 1)[0] ?? '';
    // cpu user nice system idle iowait irq softirq steal [guest guest_nice: already in user, nice]
    const f = line.trim().split(/\s+/).slice(1, 9).map(Number);
    const total = f.reduce((a, b) => a + b, 0);
    return { total, idle: (f[3] ?? 0) + (f[4] ?? 0), steal: f[7] ?? 0 };
  } catch {
    return { total: 0, idle: 0, steal: 0 };
  }
}

function mean(xs: number[]): number {
  return xs.length === 0 ? Number.NaN : xs.reduce((a, b) => a + b, 0) / xs.length;
}

export class HostProbe {
  #samples: number[] = [];
  #ticks = machineTicks();
  #stop: () => Promise<void> = () => Promise.resolve();

  /** Starts the child and resolves once it has sized its unit. */
  static async start(procs: BenchProcesses, logDir: string, say: Say): Promise<HostProbe> {
    const probe = new HostProbe();
    let sized!: (unitSize: number) => void;
    const ready = new Promise<number>((resolve) => (sized = resolve));
    const child = procs.start(
      'host-probe',
      [path.join(import.meta.dirname, 'host-probe-child.ts')],
      process.env,
      logDir,
      (line) => {
        let parsed: unknown;
        try {
          parsed = JSON.parse(line);
        } catch {
          say(`host probe: ${line}`);
          return;
        }
        const o = parsed as { unitSize?: unknown; cpuMs?: unknown };
        if (typeof o.unitSize === 'number') sized(o.unitSize);
        else if (typeof o.cpuMs === 'number') probe.#samples.push(o.cpuMs);
      },
    );
    const exited = new Promise<never>((_, reject) =>
      child.once('exit', (exit) => reject(new Error(`the host probe exited (${exit.how})`))),
    );
    // Its later exit (stop() at the end) must not surface as an unhandled rejection.
    exited.catch(() => undefined);
    const unitSize = await Promise.race([ready, exited]);
    say(`host probe: a unit of ${unitSize} JSON round trips, sampled every 250 ms`);
    probe.#stop = () => procs.stop([child]);
    return probe;
  }

  /** The readings since the last take (or the start), and a fresh start for the next. */
  take(): HostProbeReading {
    const taken = this.#samples;
    this.#samples = [];
    const ticks = machineTicks();
    const since = this.#ticks;
    this.#ticks = ticks;
    const total = ticks.total - since.total || Number.NaN;
    return {
      samples: taken.length,
      cpuMsPerUnit: round(mean(taken), 3),
      idlePct: round((100 * (ticks.idle - since.idle)) / total, 1),
      stealPct: round((100 * (ticks.steal - since.steal)) / total, 1),
    };
  }

  stop(): Promise<void> {
    return this.#stop();
  }
}
