/**
 * `npm start` (dev/start.ts) supervises its children: once the stack is up, a
 * child that dies (here: the API, kill -9) is started again with a log line
 * naming it, and SIGTERM still stops everything with nothing left behind.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { freePort } from '../../src/process/ports.ts';
import { ownDatabase, temporalAddress, uniq, workflowBundlePath } from '../support/env.ts';
import {
  isRunning,
  killAll,
  reportedChildPids,
  spawnEntry,
  waitHttpOk,
  waitOutput,
  type Proc,
} from '../support/processes.ts';

let db: Awaited<ReturnType<typeof ownDatabase>>;
let main: Proc;
let apiPort: number;

const childPids = () => reportedChildPids(main);

beforeAll(async () => {
  db = await ownDatabase('supervise');
  apiPort = await freePort();
  main = spawnEntry('main', 'dev/start.ts', {
    DATABASE_URL: db.url,
    TEMPORAL_ADDRESS: temporalAddress(),
    TEMPORAL_TASK_QUEUE: uniq('supervise'),
    WORKFLOW_BUNDLE_PATH: workflowBundlePath(),
    API_PORT: String(apiPort),
    SANDBOX_PORT: String(await freePort()),
    WORKER_METRICS_PORT: String(await freePort()),
    WORKER_SDK_METRICS_PORT: String(await freePort()),
    LOG_LEVEL: 'warn',
  });
  await waitOutput(main, /onceflow is up/, 150_000);
});

afterAll(async () => {
  const leftovers = main ? [...childPids().values()] : [];
  if (main) killAll([main]);
  await main?.exited;
  for (const pid of leftovers) if (isRunning(pid)) process.kill(pid, 'SIGKILL');
  await db?.drop();
});

it('restarts a child that was killed, and SIGTERM still stops everything', async () => {
  const first = childPids().get('api')!;
  expect(first).toBeGreaterThan(0);
  process.kill(first, 'SIGKILL');
  await waitOutput(main, /api exited unexpectedly \(signal SIGKILL\); restarting it in \d+ ms/);
  await expect.poll(() => childPids().get('api'), { timeout: 30_000 }).not.toBe(first);
  await waitHttpOk(`http://127.0.0.1:${apiPort}/healthz`, main);
  expect(main.alive()).toBe(true);

  const pids = [...childPids().values()];
  expect(pids).toHaveLength(3);
  main.child.kill('SIGTERM');
  expect(await main.exited).toEqual({ code: 0, signal: null });
  expect(main.output()).toMatch(/stopped\./);
  for (const pid of [...pids, first]) expect(isRunning(pid), `pid ${pid} still running`).toBe(false);
});
