/**
 * A worker whose start-up fails after it opened its pool and its metrics
 * server (here: Temporal refuses the connection) closes them, in reverse
 * order, and exits non-zero; its ports are free again. Before the shared
 * composition-root shape it exited on an unhandled rejection, closing nothing.
 */
import net from 'node:net';
import { expect, it } from 'vitest';
import { freePort } from '../../src/process/ports.ts';
import { testDatabaseUrl, uniq, workflowBundlePath } from '../support/env.ts';
import { spawnEntry } from '../support/processes.ts';

/** A port nothing listens on: bound, then released. */
async function refusingAddress(): Promise<string> {
  return `127.0.0.1:${await freePort()}`;
}

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

it('a worker that cannot reach Temporal closes its metrics server and pool, then exits 1', async () => {
  const metricsPort = await freePort();
  const worker = spawnEntry('worker', 'src/worker/main.ts', {
    DATABASE_URL: testDatabaseUrl(),
    TEMPORAL_ADDRESS: await refusingAddress(),
    TEMPORAL_TASK_QUEUE: uniq('startup-failure'),
    WORKFLOW_BUNDLE_PATH: workflowBundlePath(),
    WORKER_METRICS_PORT: String(metricsPort),
    WORKER_SDK_METRICS_PORT: String(await freePort()),
    LOG_LEVEL: 'debug',
  });
  const { code } = await worker.exited;
  const lines = worker
    .output()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { msg: string; resource?: string; level: string; error?: string });

  expect(code).toBe(1);
  expect(lines.find((l) => l.msg === 'worker failed to start')).toMatchObject({ level: 'error' });
  // What was opened is closed, newest first (tracing was set up first; off here, it still has a close).
  const closed = lines.filter((l) => l.msg === 'closed').map((l) => l.resource);
  expect(closed).toEqual(['metrics server', 'postgres pool', 'tracing']);
  expect(await canListen(metricsPort)).toBe(true);
  // Every line the process wrote is JSON (the SDK's own lines included).
  const text = worker
    .output()
    .split('\n')
    .filter((l) => l.trim() !== '');
  expect(text.filter((l) => !l.startsWith('{'))).toEqual([]);
});
