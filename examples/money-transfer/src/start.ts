/**
 * Starts one transfer, waits for it and prints its result:
 *   node dist/start.js <from> <to> <amount in cents> [reference]
 * The reference names the workflow, `transfer/<reference>`. Starting it again
 * while it runs attaches to it; after it finished, a new run of the same ID
 * replays every step from the ledger (the keys are the workflow ID's, not the
 * run's), so a reference never moves money twice.
 */
import { randomUUID } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import { loadConfig } from './config.js';
import { transferWorkflow } from './workflows.js';

const [from, to, amountArg, reference = randomUUID()] = process.argv.slice(2);
const amount = Number(amountArg);
if (!from || !to || !Number.isSafeInteger(amount) || amount <= 0) {
  console.error('usage: node dist/start.js <from> <to> <amount in cents> [reference]');
  process.exit(2);
}

const config = loadConfig(process.env);
const connection = await Connection.connect({ address: config.temporalAddress });
try {
  const client = new Client({ connection });
  const workflowId = `transfer/${reference}`;
  const result = await client.workflow.execute(transferWorkflow, {
    taskQueue: config.taskQueue,
    workflowId,
    workflowIdConflictPolicy: 'USE_EXISTING',
    args: [{ from, to, amount }],
  });
  console.log(JSON.stringify({ workflowId, result }));
} finally {
  await connection.close();
}
