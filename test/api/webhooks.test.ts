/**
 * POST /v1/webhooks/payments: signature, dedupe per (provider, event, consumer),
 * and the signal to the order workflow, observed in the real workflow history.
 * The workflows run on a task queue no worker polls, so they stay open and
 * every signal they receive is visible in their history.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { defaultPayloadConverter } from '@temporalio/common';
import { signWebhook } from '../../src/providers/webhook-signature.ts';
import type { PaymentProvider } from '../../src/providers/types.ts';
import { SANDBOX_CAPABILITIES } from '../../src/providers/sandbox.ts';
import { chargeScope, runCharge } from '../../src/steps/payment.ts';
import { downstreamKey } from 'onceflow';
import { uniq } from '../support/env.ts';
import { deferred } from '../support/wait.ts';
import { PROBLEM, call, newTenant, startApi, validOrder, type TestApi } from './support.ts';

type Order = { id: string; workflowId: string };

describe('POST /v1/webhooks/payments', () => {
  let api: TestApi;
  let relayOff: TestApi;
  let t: { tenantId: string; key: string };
  const secret = 'whsec_test_api';

  beforeAll(async () => {
    api = await startApi();
    relayOff = await startApi({ env: { OUTBOX_RELAY: 'off' } });
    t = await newTenant(api.pool, 'wh');
  });
  afterAll(async () => {
    await api?.close();
    await relayOff?.close();
  });

  async function createOrder(on: TestApi = api): Promise<Order> {
    const res = await call(on, 'POST', '/v1/orders', { key: t.key, idem: uniq('idem'), body: validOrder() });
    expect(res.status).toBe(202);
    const order = res.body as Order;
    if (on === api) {
      await expect
        .poll(
          async () =>
            (
              await api.pool.query('select started_at from workflow_outbox where workflow_id = $1', [
                order.workflowId,
              ])
            ).rows[0]?.started_at,
          { timeout: 10_000 },
        )
        .toBeTruthy();
    }
    return order;
  }

  function event(order: Order, type: 'charge.succeeded' | 'charge.failed', id = `evt_${uniq('e')}`) {
    return {
      id,
      type,
      created: Math.floor(Date.now() / 1000),
      data: {
        object: {
          id: `ch_${order.id}`,
          // The order's own charge (validOrder(): 2 x 1500 usd), named by the step's downstream key.
          amount: 3000,
          currency: 'usd',
          status: type === 'charge.succeeded' ? 'succeeded' : 'failed',
          ...(type === 'charge.failed' ? { failure_code: 'card_declined' } : {}),
          idempotency_key: downstreamKey(
            chargeScope({ tenantId: t.tenantId, key: `${order.workflowId}/charge` }),
          ),
          metadata: { order_id: order.id, tenant_id: t.tenantId },
        },
      },
    };
  }

  function send(
    evt: unknown,
    opts: { secret?: string; ts?: number; tamper?: (raw: string) => string; header?: string | null } = {},
    on: TestApi = api,
  ) {
    const raw = JSON.stringify(evt);
    const ts = opts.ts ?? Math.floor(Date.now() / 1000);
    const header = opts.header === undefined ? signWebhook(opts.secret ?? secret, raw, ts) : opts.header;
    return call(on, 'POST', '/v1/webhooks/payments', {
      raw: opts.tamper ? opts.tamper(raw) : raw,
      headers: header === null ? {} : { 'onceflow-signature': header },
    });
  }

  async function signals(workflowId: string) {
    const history = await api.client.workflow.getHandle(workflowId).fetchHistory();
    return (history.events ?? [])
      .map((e) => e.workflowExecutionSignaledEventAttributes)
      .filter((a): a is NonNullable<typeof a> => !!a)
      .map((a) => ({
        name: a.signalName,
        arg: defaultPayloadConverter.fromPayload(a.input!.payloads![0]!) as {
          eventId: string;
          outcome: string;
          source: string;
        },
      }));
  }

  async function recorded(eventId: string): Promise<number> {
    const { rows } = await api.pool.query(
      'select count(*)::int as n from webhook_events where event_id = $1',
      [eventId],
    );
    return rows[0].n;
  }

  /**
   * The charge step on the real ledger, with a stub provider that answers `succeeded` once
   * `answered` resolves: until then the charge's record stays in_progress, as during a real call.
   */
  function chargeThroughLedger(order: Order, answered: Promise<void> = Promise.resolve()) {
    const payments = {
      capabilities: SANDBOX_CAPABILITIES,
      createCharge: async () => {
        await answered;
        return { id: `ch_${order.id}`, status: 'succeeded' as const };
      },
      findChargeByIdempotencyKey: async () => null,
    } as unknown as PaymentProvider;
    return runCharge(
      { ledger: api.ledger, payments },
      {
        tenantId: t.tenantId,
        orderId: order.id,
        key: `${order.workflowId}/charge`,
        amount: 1000,
        currency: 'usd',
        paymentMethod: 'pm_card_visa',
      },
    );
  }

  const setStatus = (order: Order, status: string) =>
    api.pool.query('update orders set status = $3 where tenant_id = $1 and id = $2', [
      t.tenantId,
      order.id,
      status,
    ]);

  it('forged, tampered, unsigned, malformed and stale events get 401 and leave no trace', async () => {
    const order = await createOrder();
    const evt = event(order, 'charge.succeeded');
    const cases = [
      await send(evt, { secret: 'whsec_wrong' }),
      await send(evt, { tamper: (raw) => raw.replace('succeeded', 'failed') }),
      await send(evt, { header: null }),
      await send(evt, { header: 'garbage' }),
      await send(evt, { header: `t=${Math.floor(Date.now() / 1000)},v1=${'0'.repeat(64)}` }),
      await send(evt, { ts: Math.floor(Date.now() / 1000) - 600 }), // stale
      await send(evt, { ts: Math.floor(Date.now() / 1000) + 600 }), // from the future
    ];
    for (const res of cases) {
      expect(res.status).toBe(401);
      expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(res.body).toMatchObject({ type: `${PROBLEM}invalid-webhook-signature`, status: 401 });
    }
    expect(await recorded(evt.id)).toBe(0);
    expect(await signals(order.workflowId)).toEqual([]);
  });

  it('a valid event signals the workflow once; duplicates (sequential and concurrent) return 200 without signalling', async () => {
    const order = await createOrder();
    const evt = event(order, 'charge.succeeded');
    const first = await send(evt);
    expect(first.status).toBe(200);
    expect(first.body).toEqual({ received: true, duplicate: false, outcome: 'signalled' });
    const again = await send(evt);
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ received: true, duplicate: true });
    const burst = await Promise.all(Array.from({ length: 10 }, () => send(evt)));
    expect(burst.map((r) => r.status)).toEqual(Array(10).fill(200));

    const evt2 = event(order, 'charge.succeeded');
    const concurrent = await Promise.all(Array.from({ length: 10 }, () => send(evt2)));
    expect(concurrent.map((r) => r.status)).toEqual(Array(10).fill(200));
    expect(concurrent.filter((r) => (r.body as { duplicate: boolean }).duplicate === false)).toHaveLength(1);

    const got = await signals(order.workflowId);
    expect(got.map((s) => [s.name, s.arg.eventId, s.arg.source, s.arg.outcome])).toEqual([
      ['paymentEvent', evt.id, 'webhook', 'succeeded'],
      ['paymentEvent', evt2.id, 'webhook', 'succeeded'],
    ]);
    expect(await recorded(evt.id)).toBe(1);
  });

  it('reordered events are each delivered once, in arrival order; the API never moves the order itself', async () => {
    const order = await createOrder();
    const late = event(order, 'charge.failed');
    const early = event(order, 'charge.succeeded');
    expect((await send(early)).status).toBe(200);
    expect((await send(late)).status).toBe(200);
    expect((await send(early)).body).toMatchObject({ duplicate: true });
    const got = await signals(order.workflowId);
    expect(got.map((s) => [s.arg.eventId, s.arg.outcome])).toEqual([
      [early.id, 'succeeded'],
      [late.id, 'failed'],
    ]);
    // Settling (first event wins, forward-only transitions) is the workflow's job; the webhook never writes status.
    const { rows } = await api.pool.query(
      'select status, status_seq from orders where tenant_id = $1 and id = $2',
      [t.tenantId, order.id],
    );
    expect(rows).toEqual([{ status: 'accepted', status_seq: 0 }]);
  });

  it('a late event for a closed workflow is fine (200) and changes nothing', async () => {
    const order = await createOrder();
    await api.client.workflow.getHandle(order.workflowId).terminate('test: order finished');
    await api.pool.query(
      `update orders set status = 'completed', status_seq = 4 where tenant_id = $1 and id = $2`,
      [t.tenantId, order.id],
    );
    const evt = event(order, 'charge.failed');
    const res = await send(evt);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ duplicate: false, outcome: 'workflow_closed' });
    const stored = await api.pool.query('select outcome from webhook_events where event_id = $1', [evt.id]);
    expect(stored.rows).toEqual([{ outcome: 'workflow_closed' }]);
    const { rows } = await api.pool.query('select status from orders where tenant_id = $1 and id = $2', [
      t.tenantId,
      order.id,
    ]);
    expect(rows[0].status).toBe('completed');
  });

  it("no signal once the ledger holds the charge's definite outcome, unless the order waits for an event (payment_unknown, needs_attention)", async () => {
    /** The charge's ledger record, settled as the charge activity leaves it (real ledger, stub provider). */
    const chargeSettledInLedger = async (order: Order) =>
      expect((await chargeThroughLedger(order)).outcome).toBe('succeeded');

    // payment_pending and the charge final in the ledger: the workflow has the answer already.
    const settled = await createOrder();
    await setStatus(settled, 'payment_pending');
    await chargeSettledInLedger(settled);
    const evt = event(settled, 'charge.succeeded');
    const res = await send(evt);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ received: true, duplicate: false, outcome: 'charge_settled' });
    const stored = await api.pool.query('select outcome from webhook_events where event_id = $1', [evt.id]);
    expect(stored.rows).toEqual([{ outcome: 'charge_settled' }]);
    expect((await send(evt)).body).toMatchObject({ duplicate: true });
    expect(await signals(settled.workflowId)).toEqual([]);

    // payment_pending without a final record (the charge is in flight or unknown): signalled.
    const inFlight = await createOrder();
    await setStatus(inFlight, 'payment_pending');
    const evt2 = event(inFlight, 'charge.succeeded');
    expect((await send(evt2)).body).toMatchObject({ outcome: 'signalled' });
    expect((await signals(inFlight.workflowId)).map((s) => s.arg.eventId)).toEqual([evt2.id]);

    // needs_attention (parked, waiting for a re-drive or an event): signalled even with a final record.
    const parked = await createOrder();
    await setStatus(parked, 'needs_attention');
    await chargeSettledInLedger(parked);
    const evt3 = event(parked, 'charge.succeeded');
    expect((await send(evt3)).body).toMatchObject({ outcome: 'signalled' });
    expect((await signals(parked.workflowId)).map((s) => s.arg.eventId)).toEqual([evt3.id]);
  });

  it("an event that overtakes the charge's own response waits for the call to record it, and is signalled if it does not in time", async () => {
    /** A charge whose provider call is held open until `answer()`: its ledger record stays in_progress. */
    async function chargeInFlight(order: Order) {
      let answer!: () => void;
      const done = chargeThroughLedger(order, new Promise<void>((resolve) => (answer = resolve)));
      await expect
        .poll(
          async () =>
            (await api.ledger.get(chargeScope({ tenantId: t.tenantId, key: `${order.workflowId}/charge` })))
              ?.state,
        )
        .toBe('in_progress');
      return { answer, done };
    }

    // The call records its answer while the event waits: nothing to signal.
    const overtaken = await createOrder();
    await setStatus(overtaken, 'payment_pending');
    const first = await chargeInFlight(overtaken);
    // The route reads the charge's record through the app's ledger (api.ledger): count its reads
    // that find the call still in flight. A second one means the webhook is waiting (re-reading),
    // not answering from its first look.
    const overtakenKey = `${overtaken.workflowId}/charge`;
    const rereading = deferred();
    let inFlightReads = 0;
    const realGet = api.ledger.get.bind(api.ledger);
    const reads = vi.spyOn(api.ledger, 'get').mockImplementation(async (scope) => {
      const record = await realGet(scope);
      if (scope.key === overtakenKey && record?.state === 'in_progress' && ++inFlightReads === 2) {
        rereading.resolve();
      }
      return record;
    });
    try {
      const evt = event(overtaken, 'charge.succeeded');
      const pending = send(evt);
      // Either the webhook re-reads the in-flight record (it waits), or it answers without waiting.
      const firstLook = await Promise.race([
        rereading.promise.then(() => 'waiting' as const),
        pending.then((res) => ({ answeredWithoutWaiting: res.body })),
      ]);
      expect(firstLook).toBe('waiting');
      // And it has not answered: its response is not in by the next turn of the event loop.
      const checkpoint = await Promise.race([
        pending.then(() => 'answered' as const),
        new Promise<'held'>((r) => setImmediate(() => r('held'))),
      ]);
      expect(checkpoint).toBe('held');
      first.answer();
      expect((await first.done).outcome).toBe('succeeded');
      expect((await pending).body).toEqual({ received: true, duplicate: false, outcome: 'charge_settled' });
    } finally {
      reads.mockRestore();
      first.answer(); // a failed assertion above must not leave the charge held
    }
    expect(await signals(overtaken.workflowId)).toEqual([]);

    // The call stays open past the wait (its response lost, say): the event is signalled as before.
    const lost = await createOrder();
    await setStatus(lost, 'payment_pending');
    const second = await chargeInFlight(lost);
    const evt2 = event(lost, 'charge.succeeded');
    expect((await send(evt2)).body).toMatchObject({ outcome: 'signalled' });
    expect((await signals(lost.workflowId)).map((s) => s.arg.eventId)).toEqual([evt2.id]);
    second.answer();
    await second.done;
  });

  it('an event for a workflow not started yet gets 503 and stays signal_pending, so the provider retry is processed', async () => {
    const order = await createOrder(relayOff);
    const evt = event(order, 'charge.succeeded');
    const res = await send(evt);
    expect(res.status).toBe(503);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(res.headers.get('retry-after')).toBe('5');
    const pending = await api.pool.query('select outcome from webhook_events where event_id = $1', [evt.id]);
    expect(pending.rows).toEqual([{ outcome: 'signal_pending' }]);
    // The relay starts it; the provider's retry is then delivered.
    expect(await api.relay.startOne(order.workflowId)).toBe('started');
    const retry = await send(evt);
    expect(retry.status).toBe(200);
    expect(retry.body).toMatchObject({ duplicate: false, outcome: 'signalled' });
    expect((await signals(order.workflowId)).map((s) => s.arg.eventId)).toEqual([evt.id]);
  });

  it('unknown orders and event types are acknowledged (200) and recorded once; bad JSON is 400', async () => {
    const ghost = { id: 'ord_ghost', workflowId: `order/${t.tenantId}/ord_ghost` };
    const unknownOrder = await send(event(ghost, 'charge.succeeded'));
    expect(unknownOrder.status).toBe(200);
    expect(unknownOrder.body).toMatchObject({ outcome: 'ignored_unknown_order' });
    const order = await createOrder();
    const other = { ...event(order, 'charge.succeeded'), type: 'charge.refunded' };
    const res = await send(other);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ outcome: 'ignored_event_type' });
    expect((await send(other)).body).toMatchObject({ duplicate: true });
    expect(await signals(order.workflowId)).toEqual([]);
    const raw = '{not json';
    const bad = await call(api, 'POST', '/v1/webhooks/payments', {
      raw,
      headers: { 'onceflow-signature': signWebhook(secret, raw, Math.floor(Date.now() / 1000)) },
    });
    expect(bad.status).toBe(400);
  });
});
