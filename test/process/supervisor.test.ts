/**
 * The one process supervisor (src/process/supervisor.ts) with real child
 * processes: a tiny Node script whose behaviour each test picks by
 * environment variable. Nothing here waits a fixed time: each test waits for
 * the supervisor's events or for the condition it checks.
 */
import { once } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { Supervisor, type ExitInfo, type SupervisorOptions } from '../../src/process/supervisor.ts';
import { until } from '../support/wait.ts';

/**
 * The child. It prints `ready <pid>` and then, by MODE:
 *   serve        runs until signalled (SIGTERM: prints `bye` and exits 0)
 *   crash        exits with code 3 at once
 *   crash-once   exits with code 3 the first time (a marker file remembers), then serves
 *   stubborn     ignores SIGTERM (only SIGKILL ends it)
 *   grandchild   serves, and starts a grandchild (which prints `grandchild <pid>`)
 */
const CHILD = `
const fs = require('node:fs');
const { spawn } = require('node:child_process');
const mode = process.env.MODE;
// The handler goes in before \`ready\` is printed: the parent may signal the
// moment it reads that line, and a SIGTERM that lands first would end the
// child by the signal's default action instead of \`bye\` and exit 0.
process.on('SIGTERM', () => {
  if (mode === 'stubborn') return;
  console.log('bye');
  process.exit(0);
});
console.log('ready ' + process.pid);
if (mode === 'crash') process.exit(3);
if (mode === 'crash-once' && !fs.existsSync(process.env.MARKER)) {
  fs.writeFileSync(process.env.MARKER, 'crashed');
  process.exit(3);
}
if (mode === 'grandchild') {
  const g = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
  console.log('grandchild ' + g.pid);
}
setInterval(() => {}, 1000);
`;

const started: Supervisor[] = [];
const dirs: string[] = [];

afterEach(async () => {
  await Promise.all(started.splice(0).map((s) => s.stop(1_000)));
  for (const dir of dirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true });
});

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** A supervised child in `mode`, its output lines collected, and every exit and log line recorded. */
function child(mode: string, opts: Partial<SupervisorOptions> = {}, env: NodeJS.ProcessEnv = {}) {
  const lines: string[] = [];
  const logs: string[] = [];
  const exits: ExitInfo[] = [];
  const sup = new Supervisor({
    name: `child-${mode}`,
    args: ['-e', CHILD],
    env: { PATH: process.env.PATH, MODE: mode, ...env },
    onLine: (line) => lines.push(line),
    // Ready once it printed `ready`: start() resolves only then.
    ready: () =>
      until('the child to print ready', () => lines.some((l) => l.startsWith('ready'))).then(() => undefined),
    restart: { initialMs: 40, maxMs: 100, jitter: 0 },
    log: (message) => logs.push(message),
    ...opts,
  });
  sup.on('exit', (e) => exits.push(e));
  started.push(sup);
  return { sup, lines, logs, exits };
}

it('restarts a child that crashed, after the backoff delay', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'onceflow-supervisor-'));
  dirs.push(dir);
  const { sup, exits, logs } = child(
    'crash-once',
    { ready: undefined },
    { MARKER: path.join(dir, 'marker') },
  );
  const restarting = once(sup, 'restarting');
  let exitedAt = 0;
  sup.once('exit', () => (exitedAt = Date.now()));
  await sup.start();
  const [delay, restart] = (await restarting) as [number, number];
  expect([delay, restart]).toEqual([40, 1]);
  await once(sup, 'spawn');
  // The new child was not spawned before the delay ran out (a timer never fires early).
  expect(Date.now() - exitedAt).toBeGreaterThanOrEqual(39);
  expect(exits).toEqual([expect.objectContaining({ code: 3, expected: false, how: 'exit code 3' })]);
  expect(logs).toContain(
    'child-crash-once exited unexpectedly (exit code 3); restarting it in 40 ms (restart #1).',
  );
  await until('the second child to run', () => sup.alive);
  expect(sup.starts).toBe(2);
});

it('doubles the delay on each quick crash up to the cap, then gives up', async () => {
  const { sup, exits, logs } = child('crash', {
    ready: undefined,
    restart: { initialMs: 40, maxMs: 100, jitter: 0, maxRestarts: 3 },
  });
  const delays: number[] = [];
  sup.on('restarting', (d) => delays.push(d));
  const gaveUp = once(sup, 'gave-up');
  await sup.start();
  const [lastExit, restarts] = (await gaveUp) as [ExitInfo, number];
  expect(delays).toEqual([40, 80, 100]);
  expect(restarts).toBe(3);
  expect(lastExit.code).toBe(3);
  expect(sup.starts).toBe(4);
  expect(exits).toHaveLength(4);
  expect(sup.alive).toBe(false);
  expect(sup.restartPending).toBe(false);
  expect(logs.at(-1)).toBe(
    'child-crash exited unexpectedly (exit code 3); giving up after 3 quick restarts.',
  );
});

it('stops gracefully with SIGTERM and does not restart', async () => {
  const { sup, lines } = child('serve');
  await sup.start();
  const pid = sup.pid!;
  const exit = await sup.stop();
  expect(exit).toMatchObject({ code: 0, signal: null, expected: true });
  await until('the child to flush its last line', () => lines.includes('bye'));
  expect(sup.restartPending).toBe(false);
  expect(sup.starts).toBe(1);
  expect(isRunning(pid)).toBe(false);
});

it('kills a child that ignores SIGTERM after the grace period, and its whole process group', async () => {
  const { sup, lines, logs } = child('stubborn', { stopGraceMs: 300 });
  await sup.start();
  const exit = await sup.stop();
  expect(exit).toMatchObject({ signal: 'SIGKILL', expected: true });
  expect(logs).toContain('child-stubborn did not exit within 300 ms of SIGTERM; killing it');
  expect(lines).not.toContain('bye');

  const g = child('grandchild');
  await g.sup.start();
  const line = await until('the grandchild pid', () => g.lines.find((l) => l.startsWith('grandchild ')));
  const grandchild = Number(line.split(' ')[1]);
  try {
    expect(isRunning(grandchild)).toBe(true);
    await g.sup.stop();
    await until('the grandchild to be gone', () => !isRunning(grandchild));
  } finally {
    // Not left behind when the check fails.
    if (isRunning(grandchild)) process.kill(grandchild, 'SIGKILL');
  }
});

it('restarts after an outside kill -9, but not after its own kill9() until start()', async () => {
  const { sup, exits } = child('serve');
  await sup.start();
  const first = sup.pid!;
  process.kill(first, 'SIGKILL');
  await once(sup, 'ready');
  const second = sup.pid!;
  expect(second).not.toBe(first);
  expect(exits).toEqual([expect.objectContaining({ signal: 'SIGKILL', expected: false })]);

  const killed = await sup.kill9();
  expect(killed).toMatchObject({ signal: 'SIGKILL', expected: true });
  expect(sup.alive).toBe(false);
  expect(sup.restartPending).toBe(false);
  await sup.start();
  expect(sup.alive).toBe(true);
  expect(sup.pid).not.toBe(second);
  expect(sup.starts).toBe(3);
});

it('start() waits for ready, and fails when the child exits first', async () => {
  const { sup } = child('serve');
  let ready = false;
  sup.on('ready', () => (ready = true));
  await sup.start();
  expect(ready).toBe(true);

  // Never ready on its own: only the exit can end the wait.
  const crashing = child('crash', { restart: false, ready: () => new Promise(() => undefined) });
  await expect(crashing.sup.start()).rejects.toThrow('child-crash exited before it was ready (exit code 3)');
  expect(crashing.logs).toContain('child-crash exited unexpectedly (exit code 3)');
  expect(crashing.sup.restartPending).toBe(false);
});

it('asks shouldRestart before restarting', async () => {
  const asked: ExitInfo[] = [];
  const { sup, logs } = child('serve', {
    shouldRestart: (e) => {
      asked.push(e);
      return false;
    },
  });
  await sup.start();
  process.kill(sup.pid!, 'SIGKILL');
  await sup.exited;
  expect(asked).toEqual([expect.objectContaining({ signal: 'SIGKILL' })]);
  expect(sup.restartPending).toBe(false);
  expect(logs).toContain('child-serve exited unexpectedly (signal SIGKILL)');
});
