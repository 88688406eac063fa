/**
 * Worker composition root: config -> pool -> Temporal connection -> worker.
 * SIGTERM/SIGINT drain the worker (in-flight activities finish or are
 * cancelled by Temporal's shutdown grace time), then close in reverse order.
 */
import { NativeConnection } from '@temporalio/worker';
import { loadConfig } from '../config.ts';
import { createPool } from '../db/index.ts';
import { connectionSettings } from '../temporal/connection.ts';
import { createWorker } from './worker.ts';
import { log } from '../log.ts';

const config = loadConfig();
const address = config.temporal.address ?? `127.0.0.1:${config.ports.temporal}`;
const pool = createPool(config.databaseUrl);
const connection = await NativeConnection.connect(connectionSettings(address));
const worker = await createWorker({
  connection,
  namespace: config.temporal.namespace,
  taskQueue: config.temporal.taskQueue,
  deps: { pool },
  overrides: { shutdownGraceTime: '10 seconds' },
});
log.info('worker started', {
  address,
  namespace: config.temporal.namespace,
  taskQueue: config.temporal.taskQueue,
});
// worker.run() installs its own SIGINT/SIGTERM handlers that begin a graceful shutdown.
try {
  await worker.run();
} finally {
  await connection.close();
  await pool.end();
  log.info('worker stopped');
}
