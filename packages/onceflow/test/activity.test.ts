/**
 * The activity wrappers (externalStep, localStep, currentStepKey) inside a
 * MockActivityEnvironment, over the real ledger in real Postgres. A "retry"
 * is a second environment with the same workflow ID (a later attempt; a new
 * run ID too, as after a reset): the key must not change.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { ApplicationFailure, type Info } from '@temporalio/activity';
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger, type LogEntry } from '@temporalio/worker';
import {
  FinalFailure,
  LEDGER_FAILURE,
  Ledger,
  currentStepKey,
  externalStep,
  localStep,
  type ExternalOutcome,
  type ReconcileOutcome,
  type Scope,
  type StepLogger,
} from '../src/index.ts';
import { testPool, uniq } from './support/env.ts';
import { businessTable, statementRecorder } from './support/ledger.ts';
import { until } from './support/wait.ts';

const pool = testPool(4);
const ledger = new Ledger(pool);
const table = businessTable('activity_biz');
const statementsOf = statementRecorder(() => pool);

beforeAll(() => table.create(pool));
afterAll(async () => {
  await table.drop(pool);
  await pool.end();
});

/** What an activity of workflow `workflowId` sees; `attempt` > 1 is a retry. Logs are kept, not printed. */
function activityOf(workflowId: string, info: Partial<Info> = {}) {
  const logs: LogEntry[] = [];
  const env = new MockActivityEnvironment(
    { workflowExecution: { workflowId, runId: randomUUID() }, ...info },
    { logger: new DefaultLogger('TRACE', (entry) => logs.push(entry)) },
  );
  return { env, logs };
}

/** The ledger scope a step of `workflowId` named `name` lands in (tenant and type default). */
function stepScope(workflowId: string, name: string): Scope {
  return { tenantId: 'default', operationType: name.split('/')[0]!, key: `${workflowId}/${name}` };
}

async function failureOf(p: Promise<unknown>): Promise<ApplicationFailure> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ApplicationFailure);
  return err as ApplicationFailure;
}

type Charge = { chargeId: string };

/**
 * A provider that is NOT idempotent: every perform is one more effect. `lose`
 * makes the next perform act and then lose its response.
 */
function fakeProvider() {
  const effects: { downstreamKey: string; chargeId: string }[] = [];
  const calls = { perform: 0, reconcile: 0 };
  let lose = false;
  return {
    effects,
    calls,
    loseNextResponse: () => (lose = true),
    async perform({ downstreamKey }: { downstreamKey: string }): Promise<ExternalOutcome<Charge>> {
      calls.perform++;
      const chargeId = `ch_${effects.length + 1}`;
      effects.push({ downstreamKey, chargeId });
      if (lose) {
        lose = false;
        throw new Error('socket hang up');
      }
      return { state: 'succeeded', result: { chargeId }, providerRef: chargeId };
    },
    async reconcile({ downstreamKey }: { downstreamKey: string }): Promise<ReconcileOutcome<Charge>> {
      calls.reconcile++;
      const effect = effects.find((e) => e.downstreamKey === downstreamKey);
      if (!effect) return { state: 'not_found' };
      return { state: 'succeeded', result: { chargeId: effect.chargeId }, providerRef: effect.chargeId };
    },
  };
}

describe('currentStepKey', () => {
  it('is <workflowId>/<name>, with the parts of a repeated step ("status/paid") kept', async () => {
    const { env } = activityOf('order/acme/ord-1');
    expect(await env.run(async () => currentStepKey('charge'))).toBe('order/acme/ord-1/charge');
    expect(await env.run(async () => currentStepKey('status/paid'))).toBe('order/acme/ord-1/status/paid');
  });

  it('never uses the run ID: a retry and a reset see the same key', async () => {
    const wf = uniq('wf');
    const keys = await Promise.all(
      [1, 2, 3].map((attempt) => activityOf(wf, { attempt }).env.run(async () => currentStepKey('charge'))),
    );
    expect(new Set(keys)).toEqual(new Set([`${wf}/charge`]));
  });

  it('refuses an empty part, so two step names never derive the same key', async () => {
    const { env } = activityOf(uniq('wf'));
    await expect(env.run(async () => currentStepKey('status/'))).rejects.toThrow(TypeError);
    await expect(env.run(async () => currentStepKey(''))).rejects.toThrow(TypeError);
  });

  it('outside an activity, throws instead of inventing a key', () => {
    expect(() => currentStepKey('charge')).toThrow();
  });
});

describe('externalStep', () => {
  it('performs once under <workflowId>/<name>; a retry of the workflow replays the stored result', async () => {
    const wf = uniq('wf');
    const provider = fakeProvider();
    const step = () => externalStep<Charge>(ledger, 'charge', { input: { amount: 1250 }, ...provider });

    const first = await activityOf(wf).env.run(step);
    expect(first).toMatchObject({ state: 'succeeded', result: { chargeId: 'ch_1' }, replayed: false });
    const retry = await activityOf(wf, { attempt: 2 }).env.run(step);
    expect(retry).toMatchObject({ state: 'succeeded', result: { chargeId: 'ch_1' }, replayed: true });

    expect(provider.effects).toHaveLength(1);
    expect(provider.calls).toEqual({ perform: 1, reconcile: 0 });
    expect(await ledger.get(stepScope(wf, 'charge'))).toMatchObject({
      state: 'succeeded',
      providerRef: 'ch_1',
      attempts: 1,
    });
  });

  it('names the operation type by the first part of the step name, and the tenant by `tenant`', async () => {
    const wf = uniq('wf');
    const provider = fakeProvider();
    await activityOf(wf).env.run(() =>
      externalStep<Charge>(ledger, 'refund/2', { input: { amount: 1 }, tenant: 'acme', ...provider }),
    );
    const scope: Scope = { tenantId: 'acme', operationType: 'refund', key: `${wf}/refund/2` };
    expect((await ledger.get(scope))?.state).toBe('succeeded');
    expect(await ledger.get(stepScope(wf, 'refund/2'))).toBeNull();
  });

  it('a lost outcome fails the attempt as a retryable unknownFailureType; the next attempt reconciles and never performs again', async () => {
    const wf = uniq('wf');
    const provider = fakeProvider();
    provider.loseNextResponse();
    const step = () =>
      externalStep<Charge>(ledger, 'charge', {
        input: { amount: 1250 },
        unknownFailureType: 'ChargeOutcomeUnknown',
        ...provider,
      });

    const failure = await failureOf(activityOf(wf).env.run(step));
    expect(failure.type).toBe('ChargeOutcomeUnknown');
    expect(failure.nonRetryable).toBe(false);
    expect((await ledger.get(stepScope(wf, 'charge')))?.state).toBe('unknown');

    const next = await activityOf(wf, { attempt: 2 }).env.run(step);
    expect(next).toMatchObject({
      state: 'succeeded',
      result: { chargeId: 'ch_1' },
      reconciled: true,
      replayed: false,
    });
    expect(provider.calls).toEqual({ perform: 1, reconcile: 1 });
    expect(provider.effects).toHaveLength(1);
  });

  it('without unknownFailureType, a lost outcome is the retryable OperationOutcomeUnknown', async () => {
    const provider = fakeProvider();
    provider.loseNextResponse();
    const failure = await failureOf(
      activityOf(uniq('wf')).env.run(() =>
        externalStep<Charge>(ledger, 'charge', { input: { amount: 1 }, ...provider }),
      ),
    );
    expect(failure.type).toBe(LEDGER_FAILURE.outcomeUnknown);
    expect(failure.nonRetryable).toBe(false);
  });

  it('the same key with another input is a non-retryable OperationConflict, and nothing is performed', async () => {
    const wf = uniq('wf');
    const provider = fakeProvider();
    await activityOf(wf).env.run(() =>
      externalStep<Charge>(ledger, 'charge', { input: { amount: 1 }, ...provider }),
    );
    const failure = await failureOf(
      activityOf(wf, { attempt: 2 }).env.run(() =>
        externalStep<Charge>(ledger, 'charge', { input: { amount: 2 }, ...provider }),
      ),
    );
    expect(failure.type).toBe(LEDGER_FAILURE.conflict);
    expect(failure.nonRetryable).toBe(true);
    expect(provider.calls.perform).toBe(1);
  });

  it('a workflow ID too long for a key fails the step as a non-retryable InvalidInput', async () => {
    const provider = fakeProvider();
    const failure = await failureOf(
      activityOf('w'.repeat(300)).env.run(() =>
        externalStep<Charge>(ledger, 'charge', { input: { amount: 1 }, ...provider }),
      ),
    );
    expect(failure.type).toBe(LEDGER_FAILURE.invalidInput);
    expect(failure.nonRetryable).toBe(true);
    expect(provider.calls.perform).toBe(0);
  });

  it('heartbeats to Temporal and renews the lease while perform runs', async () => {
    const wf = uniq('wf');
    const { env } = activityOf(wf, { heartbeatTimeoutMs: 60 });
    let beats = 0;
    env.on('heartbeat', () => beats++);
    const scope = stepScope(wf, 'charge');
    await env.run(() =>
      externalStep<Charge>(ledger, 'charge', {
        input: { amount: 1 },
        leaseMs: 5_000,
        async perform() {
          const claimed = (await ledger.get(scope))!.leaseExpiresAt!.getTime();
          await until('a renewal of the lease', async () => {
            const now = (await ledger.get(scope))!.leaseExpiresAt!.getTime();
            return now > claimed && beats >= 2;
          });
          return { state: 'succeeded', result: { chargeId: 'ch_slow' } };
        },
        reconcile: async () => ({ state: 'not_found' }),
      }),
    );
    expect(beats).toBeGreaterThanOrEqual(2);
  });

  it('logs to the passed log: the key and outcome when it finishes, the failure type when it does not', async () => {
    const wf = uniq('wf');
    const entries: { level: 'info' | 'warn'; message: string; attrs?: Record<string, unknown> }[] = [];
    const log: StepLogger = {
      info: (message, attrs) => entries.push({ level: 'info', message, ...(attrs ? { attrs } : {}) }),
      warn: (message, attrs) => entries.push({ level: 'warn', message, ...(attrs ? { attrs } : {}) }),
    };
    const provider = fakeProvider();
    provider.loseNextResponse();
    const step = () =>
      externalStep<Charge>(ledger, 'charge', {
        input: { amount: 1 },
        unknownFailureType: 'ChargeOutcomeUnknown',
        log,
        ...provider,
      });
    const first = activityOf(wf);
    await failureOf(first.env.run(step));
    const second = activityOf(wf, { attempt: 2 });
    await second.env.run(step);

    expect(entries).toEqual([
      {
        level: 'warn',
        message: 'step did not finish',
        attrs: expect.objectContaining({ key: `${wf}/charge`, failureType: 'ChargeOutcomeUnknown' }),
      },
      {
        level: 'info',
        message: 'step finished',
        attrs: { key: `${wf}/charge`, state: 'succeeded', replayed: false, reconciled: true },
      },
    ]);
    // Never the input or the provider's answer (payloads stay out of logs).
    expect(JSON.stringify(entries)).not.toContain('ch_1');
    // The passed log replaces the activity's logger.
    expect(first.logs.concat(second.logs).filter((e) => e.message.startsWith('step '))).toEqual([]);
  });

  it("without a log, logs to the activity's own logger", async () => {
    const { env, logs } = activityOf(uniq('wf'));
    const provider = fakeProvider();
    await env.run(() => externalStep<Charge>(ledger, 'charge', { input: { amount: 1 }, ...provider }));
    expect(logs.filter((e) => e.message === 'step finished')).toHaveLength(1);
  });
});

describe('localStep', () => {
  it('commits the write with the step once; a retry replays the result without writing again', async () => {
    const wf = uniq('wf');
    const scope = stepScope(wf, 'status/paid');
    let runs = 0;
    const step = () =>
      localStep(ledger, 'status/paid', {
        input: { status: 'paid' },
        async run(tx) {
          runs++;
          await tx.query(`insert into ${table.name} (tenant_id, key, label) values ($1, $2, $3)`, [
            scope.tenantId,
            scope.key,
            'paid',
          ]);
          return { status: 'paid' };
        },
      });
    expect(await activityOf(wf).env.run(step)).toEqual({ result: { status: 'paid' }, replayed: false });
    let replay: unknown;
    // A retried attempt reads its record first: one statement answers it.
    const sent = await statementsOf(
      async () => (replay = await activityOf(wf, { attempt: 2 }).env.run(step)),
    );
    expect(replay).toEqual({ result: { status: 'paid' }, replayed: true });
    expect(sent).toEqual(['ledger_select_probe']);
    expect(runs).toBe(1);
    expect(await table.rows(pool, scope)).toEqual(['paid']);
    expect((await ledger.get(scope))?.state).toBe('succeeded');
  });

  it('a FinalFailure is stored, then thrown as a non-retryable OperationFailed on every attempt', async () => {
    const wf = uniq('wf');
    let runs = 0;
    const step = () =>
      localStep(ledger, 'reserve', {
        input: { sku: 'x' },
        async run() {
          runs++;
          throw new FinalFailure({ reason: 'out_of_stock' });
        },
      });
    for (const attempt of [1, 2]) {
      const failure = await failureOf(activityOf(wf, { attempt }).env.run(step));
      expect(failure.type).toBe(LEDGER_FAILURE.finalFailure);
      expect(failure.nonRetryable).toBe(true);
      expect(failure.details).toEqual([{ reason: 'out_of_stock' }]);
    }
    expect(runs).toBe(1);
    expect((await ledger.get(stepScope(wf, 'reserve')))?.state).toBe('failed');
  });

  it('the same key with another input is a non-retryable OperationConflict, and run is not called', async () => {
    const wf = uniq('wf');
    let runs = 0;
    const step = (qty: number) => () =>
      localStep(ledger, 'reserve', {
        input: { sku: 'x', qty },
        run: async () => ++runs,
      });
    await activityOf(wf).env.run(step(1));
    const failure = await failureOf(activityOf(wf, { attempt: 2 }).env.run(step(2)));
    expect(failure.type).toBe(LEDGER_FAILURE.conflict);
    expect(failure.nonRetryable).toBe(true);
    expect(runs).toBe(1);
  });

  it("any other error from run rolls back and surfaces unchanged, for Temporal's retry", async () => {
    const wf = uniq('wf');
    const scope = stepScope(wf, 'reserve');
    const boom = new Error('provider table locked');
    const err = await activityOf(wf)
      .env.run(() =>
        localStep(ledger, 'reserve', {
          input: { sku: 'x' },
          async run(tx) {
            await tx.query(`insert into ${table.name} (tenant_id, key, label) values ($1, $2, 'lost')`, [
              scope.tenantId,
              scope.key,
            ]);
            throw boom;
          },
        }),
      )
      .catch((e: unknown) => e);
    expect(err).toBe(boom);
    expect(await table.rows(pool, scope)).toEqual([]);
    expect(await ledger.get(scope)).toBeNull();
  });
});
