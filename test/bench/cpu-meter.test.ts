/**
 * The benchmarks' CPU meter (bench/lib/stack.ts, cpuMeter) on real processes: a process that
 * exits between the two readings counts nothing, not minus the CPU of its whole life (a pool
 * that closes an idle connection ends a Postgres backend mid-tenth).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { afterEach, expect, it } from 'vitest';
import { cpuMeter } from '../../bench/lib/stack.ts';
import { cpuSeconds } from '../../bench/lib/proc-cpu.ts';

const children: ChildProcess[] = [];
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

/** A Node process that spins for `busyMs`, then prints `busy` and waits for stdin to close. */
async function spinner(busyMs: number): Promise<ChildProcess & { pid: number }> {
  const child = spawn(
    process.execPath,
    [
      '-e',
      `const end = Date.now() + ${busyMs}; while (Date.now() < end); console.log('busy'); process.stdin.resume(); process.stdin.on('end', () => process.exit(0));`,
    ],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  children.push(child);
  await once(child.stdout!, 'data');
  return child as ChildProcess & { pid: number };
}

it('counts a live process and a process that exited meanwhile as nothing below zero', async () => {
  const gone = await spinner(400);
  const live = await spinner(50);
  expect(cpuSeconds(gone.pid)).toBeGreaterThan(0.2);

  const read = await cpuMeter(
    () => ({ gone: [gone.pid], live: [live.pid] }),
    () => Promise.resolve([]),
  )();
  gone.stdin!.end();
  await once(gone, 'exit');
  // Wait until /proc no longer shows it (it is reaped), so that its reading is 0.
  for (let i = 0; i < 100 && cpuSeconds(gone.pid) > 0; i++) await new Promise((r) => setTimeout(r, 20));
  expect(cpuSeconds(gone.pid)).toBe(0);

  const used = await read();
  expect(used.byGroup.gone).toBe(0);
  expect(used.byGroup.live).toBeGreaterThanOrEqual(0);
  expect(used.stack).toBeGreaterThanOrEqual(0);
});
