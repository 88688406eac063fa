/**
 * Runs one subscription's renewals end to end: the provider, the ledger's
 * schema, a worker, and the workflow; prints what happened as one JSON line.
 * Reads DATABASE_URL, TEMPORAL_ADDRESS and DROP_FIRST_RESPONSE=1 (lose the
 * first charge's response).
 */
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import { Ledger, migrate } from 'onceflow';
import { createRenewalActivities } from './activities.js';
import { startProvider } from './provider.js';
import { providerClient } from './provider-client.js';
import { renewalWorkflow } from './workflows.js';

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is required`);
  return value;
}

async function main(): Promise<void> {
  const databaseUrl = required('DATABASE_URL');
  const temporalAddress = required('TEMPORAL_ADDRESS');
  const provider = await startProvider({ dropFirstResponse: process.env.DROP_FIRST_RESPONSE === '1' });
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 5 });
  try {
    const applied = await migrate(pool);
    await pool.query(`create table if not exists renewal_subscriptions (
      tenant_id text not null, id text not null, paid_through text, renewals integer not null default 0,
      primary key (tenant_id, id))`);
    const tenantId = 'example';
    const subscriptionId = `sub_${randomUUID().slice(0, 8)}`;
    await pool.query('insert into renewal_subscriptions (tenant_id, id) values ($1, $2)', [
      tenantId,
      subscriptionId,
    ]);

    const ledger = new Ledger(pool);
    const connection = await NativeConnection.connect({ address: temporalAddress });
    const clientConnection = await Connection.connect({ address: temporalAddress });
    try {
      const taskQueue = `subscription-renewal-${randomUUID()}`;
      const worker = await Worker.create({
        connection,
        taskQueue,
        workflowsPath: fileURLToPath(new URL('./workflows.js', import.meta.url)),
        activities: createRenewalActivities({ ledger, provider: providerClient(provider.url) }),
      });
      const client = new Client({ connection: clientConnection });
      // One workflow per subscription: its ID, never its run ID, names every step's key.
      const workflowId = `subscription/${tenantId}/${subscriptionId}`;
      const handle = await client.workflow.start(renewalWorkflow, {
        taskQueue,
        workflowId,
        args: [{ tenantId, subscriptionId, periods: ['2026-11', '2026-12'], amount: 1200, currency: 'eur' }],
      });
      const result = await worker.runUntil(handle.result());
      const description = await handle.describe();
      const { rows: subscription } = await pool.query(
        'select paid_through, renewals from renewal_subscriptions where tenant_id = $1 and id = $2',
        [tenantId, subscriptionId],
      );
      const records = await ledger.list({ keyPrefix: `${workflowId}/` });
      console.log(
        JSON.stringify({
          workflowId,
          status: description.status.name,
          result,
          migrationsApplied: applied,
          effects: provider.charges().length,
          chargeRequests: provider.chargeRequests(),
          subscription: subscription[0],
          records: records.map((r) => ({ key: r.key, state: r.state, attempts: r.attempts })),
        }),
      );
    } finally {
      await clientConnection.close();
      await connection.close();
    }
  } finally {
    await pool.end();
    await provider.close();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
