/**
 * Histories recorded by the previous release (test/fixtures/histories/<release>/,
 * see the README there) replay with the current workflow code. A change that
 * would make an order already running in production fail its replay
 * (non-determinism: a step added, removed or reordered without a patch) fails
 * here, before it ships. order-workflow.test.ts and order-faults.test.ts also
 * replay the histories their own runs record, which covers the scenarios only
 * the tests produce.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { Worker } from '@temporalio/worker';
import type { temporal } from '@temporalio/proto';
import { workflowBundlePath } from '../support/env.ts';
import { historyFromJSON } from '../support/history.ts';
import { FAILURE } from '../../src/orders/contract.ts';

const FIXTURES = path.resolve(import.meta.dirname, '../fixtures/histories');

interface Fixture {
  /** `<release>/<scenario>`, also used as the workflow ID of the replay. */
  name: string;
  history: temporal.api.history.v1.IHistory;
  /** The file as recorded (proto JSON). */
  json: string;
}

function loadFixtures(): Fixture[] {
  const fixtures: Fixture[] = [];
  for (const release of fs.readdirSync(FIXTURES, { withFileTypes: true })) {
    if (!release.isDirectory()) continue;
    for (const file of fs.readdirSync(path.join(FIXTURES, release.name)).sort()) {
      if (!file.endsWith('.json')) continue;
      const json = fs.readFileSync(path.join(FIXTURES, release.name, file), 'utf8');
      fixtures.push({
        name: `${release.name}/${file.replace(/\.json$/, '')}`,
        history: historyFromJSON(JSON.parse(json)),
        json,
      });
    }
  }
  return fixtures;
}

async function replay(fixtures: Fixture[]): Promise<Map<string, Error | undefined>> {
  const results = new Map<string, Error | undefined>();
  for await (const result of Worker.runReplayHistories(
    { workflowBundle: { codePath: workflowBundlePath() } },
    fixtures.map((f) => ({ workflowId: f.name, history: f.history })),
  )) {
    results.set(result.workflowId, result.error);
  }
  return results;
}

describe('replay of the previous release', () => {
  const fixtures = loadFixtures();

  it('has the recorded histories, each of a finished refund', () => {
    // 0.2.0's order runs are Pinned to 0.2.0 workers (docs/UPGRADING.md); its refund runs may move.
    expect(fixtures.map((f) => f.name)).toEqual(
      expect.arrayContaining([
        'v0.2.0/refund-succeeded',
        'v0.2.0/refund-retried',
        'v0.2.0/refund-parked-redrive',
      ]),
    );
    for (const f of fixtures) {
      const last = f.history.events?.at(-1);
      expect(
        last?.workflowExecutionCompletedEventAttributes,
        `${f.name} ends with a completed workflow`,
      ).toBeTruthy();
    }
  });

  it('every recorded history replays with the current workflow code', async () => {
    const results = await replay(fixtures);
    expect([...results.keys()].sort()).toEqual(fixtures.map((f) => f.name).sort());
    const failures = [...results]
      .filter(([, error]) => error)
      .map(([name, error]) => `${name}: ${String(error)}`);
    expect(failures).toEqual([]);
  });

  it('the failure type names are the ones recorded histories and running workflows carry', () => {
    // Spelled out here on purpose: FAILURE's values are data, and a renamed value would break
    // every workflow that replays a failure recorded under the old name.
    expect(FAILURE).toEqual({
      paymentRejected: 'PaymentRejected',
      paymentOutcomeUnknown: 'PaymentOutcomeUnknown',
      // The refund workflow's (issue 27): new names, none renamed.
      refundOutcomeUnknown: 'RefundOutcomeUnknown',
      refundNotFound: 'RefundNotFound',
      receiptOutcomeUnknown: 'ReceiptOutcomeUnknown',
      statusOutcomeUnknown: 'StatusOutcomeUnknown',
      // A status a step's activity carried could not be written (issue 29): new, none renamed.
      statusNotRecorded: 'StatusNotRecorded',
      providerRejected: 'ProviderRejected',
      providerUnavailable: 'ProviderUnavailable',
      refusedAfterTakeover: 'RefusedAfterTakeover',
      operationInProgress: 'OperationInProgress',
      operationConflict: 'OperationConflict',
      invalidInput: 'InvalidInput',
      ledgerError: 'LedgerError',
      orderNotFound: 'OrderNotFound',
      redriveRefused: 'RedriveRefused',
    });
    const known = new Set<string>(Object.values(FAILURE));
    const recorded = new Set(
      fixtures.flatMap((f) =>
        [...f.json.matchAll(/"applicationFailureInfo":\s*\{\s*"type":\s*"(\w+)"/g)].map((m) => m[1]),
      ),
    );
    expect(recorded.size).toBeGreaterThan(0);
    expect([...recorded].filter((t) => t === undefined || !known.has(t))).toEqual([]);
  });

  it('a history the code would not produce fails its replay (so the test above can fail)', async () => {
    const succeeded = fixtures.find((f) => f.name.endsWith('/refund-succeeded'));
    expect(succeeded).toBeDefined();
    // The recorded refund step renamed: the workflow code schedules refundPayment where the history says otherwise.
    const tampered = JSON.parse(succeeded!.json) as {
      events: { activityTaskScheduledEventAttributes?: { activityType: { name: string } } }[];
    };
    const scheduled = tampered.events.find(
      (e) => e.activityTaskScheduledEventAttributes?.activityType.name === 'refundPayment',
    );
    expect(scheduled).toBeDefined();
    scheduled!.activityTaskScheduledEventAttributes!.activityType.name = 'refundPaymentV0';
    const results = await replay([
      { name: 'tampered/refund-succeeded', history: historyFromJSON(tampered), json: '' },
    ]);
    expect(results.get('tampered/refund-succeeded')?.name).toBe('DeterminismViolationError');
  });
});
