/**
 * The operator's merchant webhook routes (src/operator/webhook-routes.ts) against the real API (as
 * src/api/main.ts builds it, with its outbox relay running), a real worker and real receivers that
 * answer 500 until told otherwise. With a short retry window the deliveries end failed; then:
 * a preview changes nothing (no audit row, no new delivery workflow, nothing sent); a confirmed
 * redelivery needs a reason (400 without); with one, it writes one audit row per delivery, with the
 * actor from the credential, and each receiver gets the event again under the same webhook-id. A
 * tenant's API key opens none of these routes.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WorkflowNotFoundError } from '@temporalio/client';
import { startOrderStack, type OrderStack } from '../support/stack.ts';
import { call, newTenant, validOrder } from '../api/support.ts';
import { startAdminApi, startReceiver, type AdminApi } from '../support/webhooks.ts';
import { uniq } from '../support/env.ts';
import { until } from '../support/wait.ts';

/** A receiver that answers `status` (changeable); `received` lists each request's webhook-id. */
async function receiver() {
  const state = { status: 500 };
  const r = await startReceiver(() => state.status);
  return {
    url: r.url,
    get received() {
      return r.received.map((x) => x.id);
    },
    answer: (status: number) => (state.status = status),
    close: r.close,
  };
}

type Receiver = Awaited<ReturnType<typeof receiver>>;

interface Plan {
  preview: boolean;
  deliveries: {
    endpointId: string;
    eventId: string;
    tenantId: string;
    eventType: string;
    url: string;
    workflowId: string | null;
  }[];
  auditIds: string[];
}

describe('admin webhook routes', () => {
  let stack: OrderStack;
  let api: AdminApi;
  let tenant: { tenantId: string; key: string };
  const receivers: Receiver[] = [];
  let endpoints: { id: string; url: string; receiver: Receiver }[] = [];
  let eventId: string;

  beforeAll(async () => {
    stack = await startOrderStack({
      webhooks: { allowPrivate: true, firstRetryMs: 200, maxRetryMs: 500, retryWindowMs: 3_000 },
    });
    // The last test's refused credentials must stay 401s, not turn into 429s.
    api = await startAdminApi(stack, { API_ADMIN_AUTH_FAILURE_MAX: '100' });
    tenant = await newTenant(stack.pool, 'whadmin');

    // Three endpoints, each failing: one event, three deliveries, all failed after the window.
    for (let i = 0; i < 3; i++) {
      const r = await receiver();
      receivers.push(r);
      const res = await call(api, 'POST', '/v1/webhook-endpoints', {
        key: tenant.key,
        idem: uniq('we'),
        body: { url: r.url, events: ['order.completed'] },
      });
      expect(res.status, res.text).toBe(201);
      endpoints.push({ id: (res.body as { id: string }).id, url: r.url, receiver: r });
    }
    const created = await call(api, 'POST', '/v1/orders', {
      key: tenant.key,
      idem: uniq('o'),
      body: validOrder(),
    });
    expect(created.status, created.text).toBe(202);
    const { id } = created.body as { id: string };
    const done = await call(api, 'GET', `/v1/orders/${id}?wait=30`, { key: tenant.key });
    expect((done.body as { status: string }).status).toBe('completed');
    const failed = await until(
      'three failed deliveries',
      async () => {
        const res = await admin('GET', `/admin/webhooks/deliveries?status=failed&tenant=${tenant.tenantId}`);
        const rows = (res.body as { data: { eventId: string; endpointId: string }[] }).data;
        return rows.length === 3 ? rows : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );
    eventId = failed[0]!.eventId;
    expect(new Set(failed.map((d) => d.eventId))).toEqual(new Set([eventId]));
    endpoints = endpoints.sort((a, b) => a.id.localeCompare(b.id));
  });

  afterAll(async () => {
    await api?.close();
    for (const r of receivers) await r.close();
    await stack?.close();
  });

  const admin = (method: string, path: string, body?: unknown, token = api.operatorToken) =>
    call(api, method, path, { key: token, ...(body !== undefined ? { body } : {}) });

  const redeliverAudit = async () =>
    (
      await stack.pool.query<{
        id: string;
        actor: string;
        actor_credential: string;
        reason: string;
        tenant_id: string;
        workflow_id: string;
        operation_type: string;
      }>(
        `select id::text as id, actor, actor_credential, reason, tenant_id, workflow_id, operation_type
           from audit_log where action = 'webhook_redeliver' order by id`,
      )
    ).rows;

  const deliveryRows = async () =>
    (
      await stack.pool.query<{
        endpoint_id: string;
        status: string;
        workflow_id: string;
        redeliveries: number;
      }>(
        `select endpoint_id, status, workflow_id, redeliveries from webhook_deliveries
          where event_id = $1 order by endpoint_id`,
        [eventId],
      )
    ).rows;

  const redeliveryStarts = async () =>
    (
      await stack.pool.query<{ workflow_id: string }>(
        `select workflow_id from workflow_outbox where workflow_id like 'delivery/%/r%' order by workflow_id`,
      )
    ).rows.map((r) => r.workflow_id);

  it('lists the endpoints and the failed deliveries, each with its attempts', async () => {
    const eps = (await admin('GET', '/admin/webhooks/endpoints')).body as {
      data: { id: string; tenantId: string; url: string; events: string[] }[];
    };
    const mine = eps.data.filter((e) => e.tenantId === tenant.tenantId);
    expect(mine.map((e) => e.id).sort()).toEqual(endpoints.map((e) => e.id));
    expect(mine[0]!.events).toEqual(['order.completed']);
    expect(JSON.stringify(eps)).not.toContain('whsec_');

    const ep = endpoints[0]!;
    const one = await admin('GET', `/admin/webhooks/delivery?endpoint=${ep.id}&event=${eventId}`);
    expect(one.status).toBe(200);
    const { delivery, attempts } = one.body as {
      delivery: { status: string; attempts: number; lastStatus: number };
      attempts: { statusCode: number; latencyMs: number; responseExcerpt: string }[];
    };
    expect(delivery).toMatchObject({ status: 'failed', lastStatus: 500 });
    expect(attempts.length).toBe(delivery.attempts);
    expect(attempts.length).toBeGreaterThanOrEqual(2);
    for (const a of attempts) {
      expect(a.statusCode).toBe(500);
      expect(a.responseExcerpt).toBe('receiver down for maintenance');
      expect(a.latencyMs).toBeGreaterThanOrEqual(0);
    }
    expect(ep.receiver.received.length).toBe(attempts.length);
  });

  it('a preview, of one or of every failed, changes nothing: no audit row, no workflow, nothing sent', async () => {
    const before = await deliveryRows();
    const sent = receivers.map((r) => r.received.length);
    const ep = endpoints[0]!;

    // preview is the default.
    const one = await admin('POST', '/admin/webhooks/redeliver', { endpoint: ep.id, event: eventId });
    expect(one.status, one.text).toBe(200);
    expect(one.body).toEqual({
      preview: true,
      deliveries: [
        {
          endpointId: ep.id,
          eventId,
          tenantId: tenant.tenantId,
          eventType: 'order.completed',
          url: ep.url,
          workflowId: null,
        },
      ],
      auditIds: [],
    });
    const all = (await admin('POST', '/admin/webhooks/redeliver', { failed: true, preview: true }))
      .body as Plan;
    expect(all.preview).toBe(true);
    expect(all.deliveries.map((d) => d.endpointId).sort()).toEqual(endpoints.map((e) => e.id));
    expect(all.deliveries.map((d) => d.url).sort()).toEqual(endpoints.map((e) => e.url).sort());
    expect(all.auditIds).toEqual([]);

    // Give a wrongly started workflow time to show itself.
    await new Promise((r) => setTimeout(r, 1_500));
    expect(await redeliverAudit()).toEqual([]);
    expect(await redeliveryStarts()).toEqual([]);
    expect(await deliveryRows()).toEqual(before);
    await expect(
      stack.client.workflow.getHandle(`delivery/${ep.id}/${eventId}/r1`).describe(),
    ).rejects.toBeInstanceOf(WorkflowNotFoundError);
    expect(receivers.map((r) => r.received.length)).toEqual(sent);
  });

  it('a confirmed redelivery without a reason is 400, and changes nothing', async () => {
    const ep = endpoints[0]!;
    for (const body of [
      { endpoint: ep.id, event: eventId, preview: false },
      { endpoint: ep.id, event: eventId, preview: false, reason: '   ' },
      { failed: true, preview: false },
    ]) {
      const res = await admin('POST', '/admin/webhooks/redeliver', body);
      expect(res.status, JSON.stringify(body)).toBe(400);
    }
    expect(await redeliverAudit()).toEqual([]);
    expect(await redeliveryStarts()).toEqual([]);
    expect((await deliveryRows()).map((d) => d.status)).toEqual(['failed', 'failed', 'failed']);
  });

  it('one delivery, with a reason: one audit row by the credential, and the receiver gets the same webhook-id', async () => {
    const [ep, ...others] = endpoints;
    for (const r of receivers) r.answer(200);
    const sentBefore = ep!.receiver.received.length;
    const othersBefore = others.map((o) => o.receiver.received.length);
    const res = await admin('POST', '/admin/webhooks/redeliver', {
      endpoint: ep!.id,
      event: eventId,
      preview: false,
      reason: 'receiver fixed (admin test)',
    });
    expect(res.status, res.text).toBe(200);
    const plan = res.body as Plan;
    expect(plan.preview).toBe(false);
    expect(plan.deliveries).toEqual([
      {
        endpointId: ep!.id,
        eventId,
        tenantId: tenant.tenantId,
        eventType: 'order.completed',
        url: ep!.url,
        workflowId: `delivery/${ep!.id}/${eventId}/r1`,
      },
    ]);
    const audit = await redeliverAudit();
    expect(audit).toEqual([
      {
        id: plan.auditIds[0],
        actor: api.operatorName,
        actor_credential: 'operator_token',
        reason: 'receiver fixed (admin test)',
        tenant_id: tenant.tenantId,
        workflow_id: `delivery/${ep!.id}/${eventId}/r1`,
        operation_type: 'webhook.deliver',
      },
    ]);
    await until(
      'redelivered',
      async () => (await deliveryRows()).find((d) => d.endpoint_id === ep!.id)?.status === 'succeeded',
      { timeoutMs: 30_000, intervalMs: 200 },
    );
    expect(ep!.receiver.received.slice(sentBefore)).toEqual([eventId]);
    expect(new Set(ep!.receiver.received)).toEqual(new Set([eventId]));
    // The others were not touched.
    expect(others.map((o) => o.receiver.received.length)).toEqual(othersBefore);
    expect((await deliveryRows()).filter((d) => d.endpoint_id !== ep!.id).map((d) => d.status)).toEqual([
      'failed',
      'failed',
    ]);
    const one = (await admin('GET', `/admin/webhooks/delivery?endpoint=${ep!.id}&event=${eventId}`)).body as {
      delivery: { redeliveries: number; workflowId: string };
      attempts: { statusCode: number }[];
    };
    expect(one.delivery).toMatchObject({ redeliveries: 1, workflowId: `delivery/${ep!.id}/${eventId}/r1` });
    expect(one.attempts.at(-1)!.statusCode).toBe(200);
  });

  it('every failed delivery, with a reason: one audit row per delivery, each receiver gets the same webhook-id', async () => {
    const others = endpoints.slice(1);
    const auditBefore = (await redeliverAudit()).length;
    const sentBefore = others.map((o) => o.receiver.received.length);
    const res = await admin('POST', '/admin/webhooks/redeliver', {
      failed: true,
      preview: false,
      reason: 'all receivers back (admin test)',
    });
    expect(res.status, res.text).toBe(200);
    const plan = res.body as Plan;
    expect(plan.deliveries.map((d) => d.endpointId).sort()).toEqual(others.map((o) => o.id));
    expect(plan.auditIds).toHaveLength(2);
    const audit = (await redeliverAudit()).slice(auditBefore);
    expect(audit.map((a) => a.id)).toEqual(plan.auditIds);
    expect(audit.map((a) => a.workflow_id).sort()).toEqual(
      others.map((o) => `delivery/${o.id}/${eventId}/r1`).sort(),
    );
    for (const a of audit) {
      expect(a).toMatchObject({
        actor: api.operatorName,
        actor_credential: 'operator_token',
        reason: 'all receivers back (admin test)',
        tenant_id: tenant.tenantId,
      });
    }
    await until(
      'all redelivered',
      async () => (await deliveryRows()).every((d) => d.status === 'succeeded'),
      { timeoutMs: 30_000, intervalMs: 200 },
    );
    others.forEach((o, i) => {
      expect(o.receiver.received.slice(sentBefore[i])).toEqual([eventId]);
    });
    // Nothing failed is left: a second bulk redelivery has nothing to send and writes nothing.
    const again = (
      await admin('POST', '/admin/webhooks/redeliver', { failed: true, preview: false, reason: 'again' })
    ).body as Plan;
    expect(again.deliveries).toEqual([]);
    expect((await redeliverAudit()).length).toBe(auditBefore + 2);
  });

  it("a tenant's API key, or none, opens none of the admin webhook routes", async () => {
    const ep = endpoints[0]!;
    const routes: [string, string, unknown?][] = [
      ['GET', '/admin/webhooks/endpoints'],
      ['GET', '/admin/webhooks/deliveries?status=failed'],
      ['GET', `/admin/webhooks/delivery?endpoint=${ep.id}&event=${eventId}`],
      ['POST', '/admin/webhooks/redeliver', { failed: true, preview: true }],
      ['POST', '/admin/webhooks/redeliver', { failed: true, preview: false, reason: 'tenant tries' }],
    ];
    for (const [method, path, body] of routes) {
      const asTenant = await admin(method, path, body, tenant.key);
      expect(asTenant.status, `${method} ${path} with a tenant key`).toBe(401);
      const anonymous = await call(api, method, path, body !== undefined ? { body } : {});
      expect(anonymous.status, `${method} ${path} with no credential`).toBe(401);
    }
    expect(await redeliveryStarts()).toHaveLength(3);
  });
});
