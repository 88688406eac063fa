import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WorkflowIdReusePolicy } from '@temporalio/client';
import { startOrderStack, type OrderStack } from './support/stack.ts';
import { uniq } from './support/env.ts';

describe('smoke: real Temporal dev server + real Postgres', () => {
  let stack: OrderStack;
  beforeAll(async () => {
    stack = await startOrderStack();
  });
  afterAll(async () => {
    await stack?.close();
  });

  it('writes one row keyed by the workflow ID, once, even when started twice', async () => {
    const workflowId = uniq('smoke/wf');
    const start = () =>
      stack.client.workflow.execute('smokeWorkflow', {
        taskQueue: stack.taskQueue,
        workflowId,
        args: [],
        workflowIdReusePolicy: WorkflowIdReusePolicy.ALLOW_DUPLICATE,
      });

    const first = await start();
    expect(first).toEqual({ key: `${workflowId}/smoke-write`, inserted: true });
    // A second run under the same workflow ID (new run ID) derives the same key and writes nothing.
    const second = await start();
    expect(second).toEqual({ key: `${workflowId}/smoke-write`, inserted: false });

    const { rows } = await stack.pool.query(
      'select key, workflow_id from smoke_writes where workflow_id = $1',
      [workflowId],
    );
    expect(rows).toEqual([{ key: `${workflowId}/smoke-write`, workflow_id: workflowId }]);

    const history = await stack.client.workflow.getHandle(workflowId).fetchHistory();
    const types = (history.events ?? []).map((e) => e.eventType);
    expect(types.length).toBeGreaterThan(0);
    expect(
      history.events?.some(
        (e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'recordSmokeWrite',
      ),
    ).toBe(true);
    expect(history.events?.at(-1)?.workflowExecutionCompletedEventAttributes).toBeTruthy();
  });

  it('a second start with the same ID is refused under REJECT_DUPLICATE', async () => {
    const workflowId = uniq('smoke/dup');
    const opts = {
      taskQueue: stack.taskQueue,
      workflowId,
      args: [] as [],
      workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE,
    };
    const handle = await stack.client.workflow.start('smokeWorkflow', opts);
    // Whether the first run is still running or already closed, the same ID is refused.
    await expect(stack.client.workflow.start('smokeWorkflow', opts)).rejects.toThrow(/already started/i);
    await handle.result();
    const { rows } = await stack.pool.query(
      'select count(*)::int as n from smoke_writes where workflow_id = $1',
      [workflowId],
    );
    expect(rows[0].n).toBe(1);
  });
});
