/**
 * The worker process, its one composition root: config -> pool -> ledger ->
 * Temporal connection -> worker, closed in reverse order. It applies the
 * ledger's migrations first (a re-run applies nothing; two workers starting
 * at once are serialised by an advisory lock). The SDK's runtime drains the
 * worker on SIGINT or SIGTERM, and `run()` returns.
 */
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { NativeConnection, Worker } from '@temporalio/worker';
import { Ledger, migrate } from 'onceflow';
import { createActivities } from './activities.js';
import { bankClient } from './bank-client.js';
import { loadConfig } from './config.js';

const log = (msg: string, fields: Record<string, unknown> = {}) =>
  console.log(JSON.stringify({ msg, ...fields }));

const config = loadConfig(process.env);
const pool = new pg.Pool({ connectionString: config.databaseUrl, max: 10 });
// An idle connection's error (a Postgres restart) must not kill the process: the pool replaces it.
pool.on('error', (err) => log('idle database connection failed', { error: err.message }));
try {
  const migrationsApplied = await migrate(pool);
  const ledger = new Ledger(pool);
  const connection = await NativeConnection.connect({ address: config.temporalAddress });
  try {
    const worker = await Worker.create({
      connection,
      taskQueue: config.taskQueue,
      workflowsPath: fileURLToPath(new URL('./workflows.js', import.meta.url)),
      activities: createActivities({ bank: bankClient(config.bankUrl), ledger }),
    });
    log('worker running', { taskQueue: config.taskQueue, migrationsApplied });
    await worker.run();
    log('worker stopped');
  } finally {
    await connection.close();
  }
} finally {
  await pool.end();
}
