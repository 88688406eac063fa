/**
 * externalStep in a real Worker against a real Temporal dev server (the
 * local CLI, never a download): the provider acts but its response is lost,
 * Temporal retries the activity, and the retry reconciles instead of charging
 * again. One effect, under the key `<workflowId>/charge`.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fs from 'node:fs';
import path from 'node:path';
import { Context } from '@temporalio/activity';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { DefaultLogger, Runtime, Worker } from '@temporalio/worker';
import { Ledger, downstreamKey, externalStep, type ReconcileOutcome, type StepLogger } from '../src/index.ts';
import type { ChargeActivities } from './fixtures/charge-workflow.ts';
import { testPool, uniq } from './support/env.ts';

/** The Temporal CLI: TEMPORAL_CLI_PATH, or the repo's .tools/bin/temporal next to packages/. */
function temporalCli(): string {
  const cli =
    process.env.TEMPORAL_CLI_PATH || path.resolve(import.meta.dirname, '../../../.tools/bin/temporal');
  try {
    fs.accessSync(cli, fs.constants.X_OK);
  } catch {
    throw new Error(
      `no Temporal CLI at ${cli}: set TEMPORAL_CLI_PATH to a local \`temporal\` binary ` +
        '(this test never downloads one)',
    );
  }
  return cli;
}

const pool = testPool(4);
const ledger = new Ledger(pool);
let env: TestWorkflowEnvironment | undefined;

beforeAll(async () => {
  const cli = temporalCli();
  // ERROR: the first attempt's failure is expected, and the worker would log it as a warning.
  Runtime.install({ logger: new DefaultLogger('ERROR') });
  env = await TestWorkflowEnvironment.createLocal({
    server: { executable: { type: 'existing-path', path: cli }, ip: '127.0.0.1' },
  });
});

afterAll(async () => {
  await env?.teardown();
  await pool.end();
});

describe('externalStep in a Temporal worker', () => {
  it('a lost response: Temporal retries, the retry reconciles, and the provider charged exactly once', async () => {
    // A provider that is NOT idempotent (every perform is one more charge) and loses its first response.
    const charges: { downstreamKey: string; chargeId: string }[] = [];
    let performs = 0;
    const attempts: number[] = [];
    const warnings: Record<string, unknown>[] = [];
    const log: StepLogger = { info: () => undefined, warn: (_m, attrs) => warnings.push(attrs ?? {}) };

    const activities: ChargeActivities = {
      async charge(amount) {
        attempts.push(Context.current().info.attempt);
        const run = await externalStep<{ chargeId: string }>(ledger, 'charge', {
          input: { amount },
          unknownFailureType: 'ChargeOutcomeUnknown',
          log,
          async perform({ downstreamKey }) {
            performs++;
            const chargeId = `ch_${charges.length + 1}`;
            charges.push({ downstreamKey, chargeId });
            if (performs === 1) throw new Error('connection reset after the provider acted');
            return { state: 'succeeded', result: { chargeId }, providerRef: chargeId };
          },
          async reconcile({ downstreamKey }): Promise<ReconcileOutcome<{ chargeId: string }>> {
            const found = charges.find((c) => c.downstreamKey === downstreamKey);
            return found
              ? { state: 'succeeded', result: { chargeId: found.chargeId }, providerRef: found.chargeId }
              : { state: 'not_found' };
          },
        });
        return { ...run.result, reconciled: run.reconciled, replayed: run.replayed };
      },
    };

    const taskQueue = uniq('onceflow-pkg');
    const worker = await Worker.create({
      connection: env!.nativeConnection,
      taskQueue,
      workflowsPath: path.resolve(import.meta.dirname, 'fixtures/charge-workflow.ts'),
      activities,
    });
    const workflowId = uniq('charge/acme');
    const result = await worker.runUntil(
      env!.client.workflow.execute('chargeOnce', { taskQueue, workflowId, args: [1250] }),
    );

    expect(result).toEqual({ chargeId: 'ch_1', reconciled: true });
    expect(charges).toHaveLength(1);
    expect(performs).toBe(1);
    expect(attempts).toEqual([1, 2]);
    expect(warnings).toEqual([expect.objectContaining({ failureType: 'ChargeOutcomeUnknown' })]);
    const scope = { tenantId: 'default', operationType: 'charge', key: `${workflowId}/charge` };
    expect(await ledger.get(scope)).toMatchObject({ state: 'succeeded', providerRef: 'ch_1', attempts: 2 });
    expect(charges[0]!.downstreamKey).toBe(downstreamKey(scope));
  });
});
