/**
 * The operator's recovery path end to end: real Postgres, the real Temporal
 * dev server, the real sandbox over HTTP, and the CLI run as a child process.
 * Two orders are parked in needs_attention with an unknown charge (every
 * charge response is lost and every lookup fails). One is resolved by hand;
 * the other is reconciled once the provider answers again and re-driven.
 * Both complete with exactly one charge, and every action is in the audit log.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { WorkflowHandle } from '@temporalio/client';
import { startOrderStack, type OrderStack } from '../support/stack.ts';
import type { orderWorkflow } from '../../workflows/order.ts';
import { stepKeys, type OrderWorkflowInput } from '../../src/orders/model.ts';
import { downstreamKey } from 'onceflow';
import type {
  AuditEntry,
  OperationStory,
  OperationListItem,
  AttentionItem,
} from '../../src/operator/index.ts';
import { json, runOps } from './support.ts';
import { untilStatus } from '../support/wait.ts';

let stack: OrderStack;
interface Parked {
  input: OrderWorkflowInput;
  workflowId: string;
  chargeKey: string;
  handle: WorkflowHandle<typeof orderWorkflow>;
}
let a: Parked;
let b: Parked;
const cli = (...args: string[]) => runOps(args, { sandboxUrl: stack.sandbox.url });

async function auditRows(where: { key?: string; workflowId?: string }): Promise<AuditEntry[]> {
  const { rows } = await stack.pool.query<{
    id: string;
    actor: string;
    source: string;
    action: string;
    reason: string | null;
    operation_key: string | null;
    workflow_id: string | null;
    before: Record<string, unknown> | null;
    after: Record<string, unknown> | null;
  }>(
    `select id::text, actor, source, action, reason, operation_key, workflow_id, before, after from audit_log
      where ($1::text is null or operation_key = $1) and ($2::text is null or workflow_id = $2) order by id`,
    [where.key ?? null, where.workflowId ?? null],
  );
  return rows.map((r) => ({
    id: r.id,
    actor: r.actor,
    source: r.source,
    action: r.action,
    reason: r.reason,
    operationKey: r.operation_key,
    workflowId: r.workflow_id,
    before: r.before,
    after: r.after,
  })) as unknown as AuditEntry[];
}

const state = (j: unknown) => (j as { state?: string; status?: string } | null)?.state;

beforeAll(async () => {
  stack = await startOrderStack();
  // The first charge request of each order reaches the provider, but every response is lost,
  // and no lookup answers: the outcome is unknown and can't be reconciled, so the orders park.
  await stack.fault('charges.create', 'drop_after', 100);
  await stack.fault('charges.lookup', 'fail_before', 1000);
  const start = async (): Promise<Parked> => {
    const { input, workflowId, handle } = await stack.startOrder();
    return { input, workflowId, handle, chargeKey: stepKeys.charge(workflowId) };
  };
  [a, b] = await Promise.all([start(), start()]);
  await Promise.all([untilStatus(a.handle, 'needs_attention'), untilStatus(b.handle, 'needs_attention')]);
});
afterAll(async () => {
  await stack?.close();
});

describe('operator CLI', () => {
  it('list, show and attention tell the story of the unknown charges', async () => {
    const listed = json<OperationListItem[]>(
      await cli('list', '--state', 'unknown', '--type', 'payment.charge', '--tenant', 'acme', '--json'),
    );
    const mine = listed.filter((r) => r.key === a.chargeKey || r.key === b.chargeKey);
    expect(mine).toHaveLength(2);
    expect(mine.every((r) => r.state === 'unknown' && !('ownerToken' in r))).toBe(true);
    expect(mine.find((r) => r.key === a.chargeKey)?.workflowId).toBe(a.workflowId);

    const human = await cli('list', '--tenant', 'acme', '--key-prefix', `${a.workflowId}/`);
    expect(human.code).toBe(0);
    expect(human.stdout).toMatch(/tenantId\s+operationType\s+key\s+state/);
    expect(human.stdout).toContain(a.chargeKey);

    const story = json<OperationStory>(await cli('show', 'acme', 'payment.charge', a.chargeKey, '--json'));
    expect(story.record.state).toBe('unknown');
    expect(story.downstreamKey).toBe(
      downstreamKey({ tenantId: 'acme', operationType: 'payment.charge', key: a.chargeKey }),
    );
    expect(story.provider).toMatchObject({
      provider: 'payments',
      lookedUpBy: story.downstreamKey,
      found: false,
    });
    expect(story.provider.error).toBeTruthy(); // lookups are failing
    expect(story.workflowId).toBe(a.workflowId);
    expect(story.temporalUiUrl).toBe(
      `http://temporal-ui.test/namespaces/default/workflows/${encodeURIComponent(a.workflowId)}`,
    );
    expect(story.order?.status).toBe('needs_attention');

    const attention = json<AttentionItem[]>(await cli('attention', '--tenant', 'acme', '--json'));
    const parked = attention.filter((o) => o.orderId === a.input.orderId || o.orderId === b.input.orderId);
    expect(parked).toHaveLength(2);
    expect(parked[0]?.lastError).toMatch(/unknown/);

    const missing = await cli('show', 'acme', 'payment.charge', `${a.workflowId}/nope`);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/not_found/);

    // Under --json the error is one JSON object too, with the same exit status.
    const missingJson = await cli('show', 'acme', 'payment.charge', `${a.workflowId}/nope`, '--json');
    expect(missingJson.code).toBe(1);
    expect(missingJson.stdout).toBe('');
    expect(JSON.parse(missingJson.stderr)).toEqual({
      error: { code: 'not_found', message: expect.any(String) },
    });
  });

  it('reconcile while the provider cannot answer: unchanged, audited, non-zero exit', async () => {
    const r = await cli('reconcile', 'acme', 'payment.charge', a.chargeKey, '--actor', 'alice', '--json');
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stdout)).toMatchObject({ changed: false, before: 'unknown', after: 'unknown' });
    const rows = await auditRows({ key: a.chargeKey });
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({
      actor: 'alice',
      source: 'cli',
      action: 'reconcile',
      workflowId: a.workflowId,
    });
    expect(state(rows[0]!.before)).toBe('unknown');
    expect(state(rows[0]!.after)).toBe('unknown');
    expect((rows[0]!.after as { reconcileError?: string }).reconcileError).toMatch(/lookup failed/);
  });

  it('resolve without a reason (or with a blank one) fails and writes nothing', async () => {
    const before = (await auditRows({ key: a.chargeKey })).length;
    const noReason = await cli('resolve', 'acme', 'payment.charge', a.chargeKey, '--outcome', 'succeeded');
    expect(noReason.code).toBe(2);
    expect(noReason.stderr).toMatch(/--reason/);
    const blank = await cli(
      'resolve',
      'acme',
      'payment.charge',
      a.chargeKey,
      '--outcome',
      'succeeded',
      '--reason',
      '   ',
    );
    expect(blank.code).toBe(2);
    const badOutcome = await cli(
      'resolve',
      'acme',
      'payment.charge',
      a.chargeKey,
      '--outcome',
      'maybe',
      '--reason',
      'x',
    );
    expect(badOutcome.code).toBe(2);
    expect(await auditRows({ key: a.chargeKey })).toHaveLength(before);
    expect(
      (await stack.ledger.get({ tenantId: 'acme', operationType: 'payment.charge', key: a.chargeKey }))
        ?.state,
    ).toBe('unknown');
  });

  it('resolve settles the unknown charge in the ledger, audits it, and the order completes', async () => {
    const charges = await stack.charges(a.input.orderId);
    expect(charges).toHaveLength(1);
    const chargeId = charges[0]!.id;
    const reason = 'provider dashboard shows the charge captured';
    const res = json<{
      before: string;
      after: string;
      auditId: string;
      signalled: boolean;
      workflowId: string;
    }>(
      await cli(
        'resolve',
        'acme',
        'payment.charge',
        a.chargeKey,
        '--outcome',
        'succeeded',
        '--reason',
        reason,
        '--charge-id',
        chargeId,
        '--actor',
        'alice',
        '--json',
      ),
    );
    expect(res).toMatchObject({
      before: 'unknown',
      after: 'succeeded',
      signalled: true,
      workflowId: a.workflowId,
    });

    const rows = await auditRows({ key: a.chargeKey });
    const resolve = rows.at(-1)!;
    expect(resolve).toMatchObject({
      id: res.auditId,
      actor: 'alice',
      source: 'cli',
      action: 'resolve',
      reason,
    });
    expect(state(resolve.before)).toBe('unknown');
    expect(resolve.after).toMatchObject({ state: 'succeeded', providerRef: chargeId });

    const record = await stack.ledger.get({
      tenantId: 'acme',
      operationType: 'payment.charge',
      key: a.chargeKey,
    });
    expect(record).toMatchObject({ state: 'succeeded', providerRef: chargeId });

    const result = await a.handle.result();
    expect(result).toMatchObject({ status: 'completed', chargeId });
    expect(await stack.charges(a.input.orderId)).toHaveLength(1);
    expect(await stack.messages(a.input.orderId)).toHaveLength(1);
    expect((await stack.orderRow(a.input)).status).toBe('completed');

    // A decision never overwrites an outcome: a second resolve is refused and writes nothing.
    const again = await cli(
      'resolve',
      'acme',
      'payment.charge',
      a.chargeKey,
      '--outcome',
      'failed',
      '--reason',
      'oops',
    );
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/invalid_state/);
    expect(await auditRows({ key: a.chargeKey })).toHaveLength(rows.length);
  });

  it('reconcile once the provider answers, then re-drive: the parked order resumes under the same keys', async () => {
    await stack.clearFaults();
    const noReason = await cli('redrive', 'acme', b.input.orderId);
    expect(noReason.code).toBe(2);
    expect(await auditRows({ workflowId: b.workflowId })).toHaveLength(0);

    const rec = json<{ changed: boolean; before: string; after: string }>(
      await cli('reconcile', 'acme', 'payment.charge', b.chargeKey, '--reason', 'provider is back', '--json'),
    );
    expect(rec).toMatchObject({ changed: true, before: 'unknown', after: 'succeeded' });
    const [reconciled] = await auditRows({ key: b.chargeKey });
    expect(reconciled).toMatchObject({ action: 'reconcile', reason: 'provider is back' });
    expect(state(reconciled!.before)).toBe('unknown');
    expect(state(reconciled!.after)).toBe('succeeded');

    const red = await cli(
      'redrive',
      'acme',
      b.input.orderId,
      '--reason',
      'charge reconciled; resume',
      '--actor',
      'bob',
    );
    expect(red.code).toBe(0);
    expect(red.stdout).toContain(b.workflowId);
    const rows = (await auditRows({ workflowId: b.workflowId })).filter((r) => r.action === 'redrive');
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ actor: 'bob', reason: 'charge reconciled; resume', operationKey: null });
    expect(rows[0]!.before).toMatchObject({ status: 'needs_attention' });

    const result = await b.handle.result();
    expect(result.status).toBe('completed');
    const charges = await stack.charges(b.input.orderId);
    expect(charges).toHaveLength(1);
    expect(result.chargeId).toBe(charges[0]!.id);
    expect(await stack.messages(b.input.orderId)).toHaveLength(1);

    // Only needs_attention orders can be re-driven.
    const again = await cli('redrive', 'acme', b.input.orderId, '--reason', 'again');
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/invalid_state.*completed/);
    expect(
      (await auditRows({ workflowId: b.workflowId })).filter((r) => r.action === 'redrive'),
    ).toHaveLength(1);
  });

  it('audit shows every action, newest first, in JSON and as a table', async () => {
    const entries = json<AuditEntry[]>(await cli('audit', '--key', a.chargeKey, '--json'));
    expect(entries.map((e) => e.action)).toEqual(['resolve', 'reconcile']);
    const table = await cli('audit', '--workflow', b.workflowId);
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(/redrive.*needs_attention/);
  });

  it('bad usage exits 2 with the usage text', async () => {
    const r = await cli('frobnicate');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/unknown command/);
    expect(r.stderr).toMatch(/Usage: ops <command>/);
    expect((await cli('list', '--state', 'weird')).code).toBe(2);
    expect((await cli('show', 'acme', 'payment.charge')).code).toBe(2);
  });
});

describe('audit_log', () => {
  it('refuses UPDATE, DELETE and TRUNCATE', async () => {
    const { rows } = await stack.pool.query<{ id: string }>(
      `insert into audit_log (actor, source, action, reason, tenant_id) values ('t', 'cli', 'redrive', 'test', 'acme')
       returning id::text`,
    );
    const id = rows[0]!.id;
    await expect(
      stack.pool.query(`update audit_log set reason = 'rewritten' where id = $1`, [id]),
    ).rejects.toThrow(/append-only: UPDATE/);
    await expect(stack.pool.query(`delete from audit_log where id = $1`, [id])).rejects.toThrow(
      /append-only: DELETE/,
    );
    await expect(stack.pool.query(`truncate audit_log`)).rejects.toThrow(/append-only: TRUNCATE/);
    const after = await stack.pool.query(`select reason from audit_log where id = $1`, [id]);
    expect(after.rows[0]?.reason).toBe('test');
    // A decision without a reason can't be stored even by hand.
    await expect(
      stack.pool.query(
        `insert into audit_log (actor, source, action, reason, tenant_id) values ('t', 'cli', 'resolve', ' ', 'acme')`,
      ),
    ).rejects.toThrow(/audit_log_reason_check/);
  });
});
