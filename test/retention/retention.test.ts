/** The reaper and the backlog queries against real Postgres. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Pool } from '../../src/db/index.ts';
import { Ledger, type Scope } from 'onceflow';
import { namedPool, scopeFor } from '../support/ledger.ts';
import type { ScheduleHandle } from '@temporalio/client';
import { startOrderStack, type OrderStack } from '../support/stack.ts';
import { uniq } from '../support/env.ts';
import { until } from '../support/wait.ts';
import { assertRetentionWindow, ensureRetentionSchedule } from '../../src/retention/schedule.ts';
import type { RetentionSummary } from '../../activities/retention.ts';
import { insertOutboxStatement, markOutboxStarted } from '../../src/outbox/sql.ts';
import { recordWebhookEvent } from '../../src/webhooks/sql.ts';

let pool: Pool;

beforeAll(() => {
  ({ pool } = namedPool(5));
});

afterAll(async () => {
  await pool?.end();
});

const input = { schemaVersion: 1, value: { n: 1 } };
/** Far enough in the past that no other test's record is this old. */
const ANCIENT = '2001-01-01T00:00:00Z';
const TWENTY_YEARS_MS = 20 * 365 * 24 * 60 * 60 * 1000;

/** Backdates a record, as if it had been created (and completed) long ago. */
async function backdate(scope: Scope): Promise<void> {
  const { rowCount } = await pool.query(
    `update operations
        set created_at = $4, updated_at = $4, completed_at = case when completed_at is null then null else $4::timestamptz end
      where tenant_id = $1 and operation_type = $2 and key = $3`,
    [scope.tenantId, scope.operationType, scope.key, ANCIENT],
  );
  expect(rowCount).toBe(1);
}

describe('reap', () => {
  it('deletes only old succeeded/failed records; spares in_progress and unknown', async () => {
    const ledger = new Ledger(pool);
    const tenant = scopeFor('reap').tenantId;
    const at = (key: string): Scope => ({ tenantId: tenant, operationType: 'test.reap', key });

    const oldDone = [at('old-ok-1'), at('old-ok-2'), at('old-ok-3')];
    for (const s of oldDone) await ledger.runLocal(s, input, async () => 'ok');
    const oldFailed = at('old-failed');
    const failedClaim = await ledger.claim(oldFailed, input);
    if (failedClaim.kind !== 'claimed') throw new Error('expected a claim');
    await ledger.complete(oldFailed, failedClaim.ownerToken, {
      state: 'failed',
      result: { code: 'declined' },
    });
    const oldInProgress = at('old-in-progress');
    await ledger.claim(oldInProgress, input, { leaseMs: 60_000 });
    const oldExpiredClaim = at('old-expired-claim');
    await ledger.claim(oldExpiredClaim, input, { leaseMs: 1 });
    const oldUnknown = at('old-unknown');
    const unknownClaim = await ledger.claim(oldUnknown, input);
    if (unknownClaim.kind !== 'claimed') throw new Error('expected a claim');
    await ledger.markUnknown(oldUnknown, unknownClaim.ownerToken, { reason: 'lost' });
    const recentDone = at('recent-ok');
    await ledger.runLocal(recentDone, input, async () => 'ok');

    for (const s of [...oldDone, oldFailed, oldInProgress, oldExpiredClaim, oldUnknown]) await backdate(s);

    // One batch large enough to hold every candidate: if the reaper's filter let
    // unresolved records through, ours would be among them.
    const result = await ledger.reap({ olderThanMs: TWENTY_YEARS_MS, batchSize: 1000 });
    // Other test files never backdate, so everything this window catches is ours.
    expect(result).toEqual({ deleted: 4, batches: 1, byState: { succeeded: 3, failed: 1 } });

    for (const s of [...oldDone, oldFailed]) expect(await ledger.get(s)).toBeNull();
    expect((await ledger.get(oldInProgress))?.state).toBe('in_progress');
    expect((await ledger.get(oldExpiredClaim))?.state).toBe('in_progress');
    expect((await ledger.get(oldUnknown))?.state).toBe('unknown');
    expect((await ledger.get(recentDone))?.state).toBe('succeeded');

    // The backlog queries see the old unresolved records.
    expect(await ledger.oldestAgeSeconds('unknown')).toBeGreaterThan(TWENTY_YEARS_MS / 1000);
    const unknown = await ledger.list({ tenantId: tenant, state: 'unknown', olderThanMs: TWENTY_YEARS_MS });
    expect(unknown.map((r) => r.key)).toEqual(['old-unknown']);
    const byPrefix = await ledger.list({ tenantId: tenant, keyPrefix: 'old-', limit: 10 });
    expect(byPrefix.map((r) => r.key).sort()).toEqual([
      'old-expired-claim',
      'old-in-progress',
      'old-unknown',
    ]);
  });

  it('maxBatches bounds one call', async () => {
    const ledger = new Ledger(pool);
    const tenant = scopeFor('reap-bound').tenantId;
    const scopes = ['a', 'b', 'c'].map((key): Scope => ({
      tenantId: tenant,
      operationType: 'test.reap',
      key,
    }));
    for (const s of scopes) await ledger.runLocal(s, input, async () => 1);
    for (const s of scopes) await backdate(s);
    const first = await ledger.reap({ olderThanMs: TWENTY_YEARS_MS, batchSize: 1, maxBatches: 2 });
    expect(first).toMatchObject({ deleted: 2, batches: 2 });
    const rest = await ledger.reap({ olderThanMs: TWENTY_YEARS_MS, batchSize: 1, maxBatches: 5 });
    expect(rest).toMatchObject({ deleted: 1, batches: 2 }); // 1 + 0: stops at the first short batch
  });
});

/**
 * Retention runs as a Temporal Schedule. Triggered on the real dev server, it
 * deletes old finished records and spares in_progress and unknown ones,
 * however old. It lives in this file because both reap the whole table: tests
 * in one file run one after another, so neither sees the other's records vanish.
 */
describe('retention schedule', () => {
  const DAY = 24 * 60 * 60 * 1000;
  let stack: OrderStack;
  let schedule: ScheduleHandle | undefined;

  beforeAll(async () => {
    stack = await startOrderStack();
  });
  afterAll(async () => {
    await schedule?.delete().catch(() => undefined);
    await stack?.close();
  });

  it('refuses a window shorter than the provider key window', () => {
    expect(() => assertRetentionWindow(DAY - 1)).toThrow(/24 h/);
    expect(() => assertRetentionWindow(DAY)).not.toThrow();
  });

  it('the schedule is created once, runs, deletes old finished records and spares unknown and in-progress ones; the same run prunes started outbox rows and webhook markers', async () => {
    const tenantId = uniq('retention');
    const scope = (key: string) => ({ tenantId, operationType: 'test.retention', key });
    const input = { schemaVersion: 1, value: { n: 1 } };

    // Old finished records (succeeded and failed), a recent one, and unresolved ones of every age.
    for (const key of ['old-ok-1', 'old-ok-2', 'recent-ok'])
      await stack.ledger.runLocal(scope(key), input, async () => 'ok');
    const failedClaim = await stack.ledger.claim(scope('old-failed'), input);
    if (failedClaim.kind !== 'claimed') throw new Error('expected a claim');
    await stack.ledger.complete(scope('old-failed'), failedClaim.ownerToken, {
      state: 'failed',
      result: 'declined',
    });
    const inProgress = await stack.ledger.claim(scope('old-in-progress'), input, { leaseMs: 60_000 });
    if (inProgress.kind !== 'claimed') throw new Error('expected a claim');
    const unknown = await stack.ledger.claim(scope('old-unknown'), input);
    if (unknown.kind !== 'claimed') throw new Error('expected a claim');
    await stack.ledger.markUnknown(scope('old-unknown'), unknown.ownerToken, { message: 'timeout' });
    await stack.pool.query(
      `update operations
          set created_at = now() - interval '30 days',
              updated_at = now() - interval '30 days',
              completed_at = case when completed_at is null then null else now() - interval '30 days' end
        where tenant_id = $1 and key like 'old-%'`,
      [tenantId],
    );

    // The same run prunes the other tables: an outbox row started 30 days ago, one never
    // started, and a webhook marker received 30 days ago.
    const started = await stack.insertOrder();
    const unstarted = await stack.insertOrder();
    for (const { input, workflowId } of [started, unstarted])
      await stack.pool.query(
        insertOutboxStatement({
          workflowId,
          tenantId: input.tenantId,
          orderId: input.orderId,
          workflowType: 'orderWorkflow',
          taskQueue: uniq('retention-unpolled'),
          input,
        }),
      );
    await markOutboxStarted(stack.pool, started.workflowId);
    await stack.pool.query(
      `update workflow_outbox set created_at = now() - interval '30 days',
              started_at = case when started_at is null then null else now() - interval '30 days' end
        where workflow_id = any($1::text[])`,
      [[started.workflowId, unstarted.workflowId]],
    );
    const eventId = uniq('evt');
    await recordWebhookEvent(stack.pool, {
      provider: 'sandbox',
      eventId,
      consumer: 'payments',
      eventType: 'charge.succeeded',
      tenantId: null,
      orderId: null,
      outcome: 'signalled',
    });
    await stack.pool.query(
      `update webhook_events set received_at = now() - interval '30 days' where event_id = $1`,
      [eventId],
    );

    const scheduleId = uniq('retention-schedule');
    const opts = {
      scheduleId,
      taskQueue: stack.taskQueue,
      windowMs: 7 * DAY,
      intervalMs: 60 * 60 * 1000,
      batchSize: 1,
    };
    expect(await ensureRetentionSchedule(stack.client, opts)).toBe(true);
    // A second worker starting up leaves the existing schedule alone.
    expect(await ensureRetentionSchedule(stack.client, opts)).toBe(false);
    const handle = stack.client.schedule.getHandle(scheduleId);
    schedule = handle;
    const described = await handle.describe();
    expect(described.action.type).toBe('startWorkflow');

    await handle.trigger();
    const workflowId = await until(
      'the schedule to start its workflow',
      async () => {
        const d = await handle.describe();
        return (
          d.info.recentActions[0]?.action.workflow.workflowId ?? d.info.runningActions[0]?.workflow.workflowId
        );
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
    const summary = (await stack.client.workflow.getHandle(workflowId).result()) as RetentionSummary;
    expect(summary.deleted).toBeGreaterThanOrEqual(3);
    expect(summary.batches).toBeGreaterThanOrEqual(3); // batchSize 1: bounded batches
    expect(summary.spared.unknown).toBeGreaterThanOrEqual(1);
    expect(summary.spared.inProgress).toBeGreaterThanOrEqual(1);

    const { rows } = await stack.pool.query<{ key: string; state: string }>(
      'select key, state from operations where tenant_id = $1 order by key',
      [tenantId],
    );
    expect(rows).toEqual([
      { key: 'old-in-progress', state: 'in_progress' },
      { key: 'old-unknown', state: 'unknown' },
      { key: 'recent-ok', state: 'succeeded' },
    ]);

    expect(summary.outbox).toMatchObject({ windowMs: 7 * DAY });
    expect(summary.outbox.deleted).toBeGreaterThanOrEqual(1);
    expect(summary.webhookEvents).toMatchObject({ windowMs: 7 * DAY });
    expect(summary.webhookEvents.deleted).toBeGreaterThanOrEqual(1);
    const outbox = await stack.pool.query<{ workflow_id: string }>(
      'select workflow_id from workflow_outbox where workflow_id = any($1::text[])',
      [[started.workflowId, unstarted.workflowId]],
    );
    expect(outbox.rows).toEqual([{ workflow_id: unstarted.workflowId }]);
    const events = await stack.pool.query('select 1 from webhook_events where event_id = $1', [eventId]);
    expect(events.rowCount).toBe(0);
  });
});
