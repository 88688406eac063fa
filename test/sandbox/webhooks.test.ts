import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { verifyWebhook } from '../../src/providers/webhook-signature.ts';
import { uniq } from '../support/env.ts';
import {
  chargeBody,
  SECRET,
  startReceiver,
  startTestSandbox,
  type TestSandbox,
  type Json,
} from './harness.ts';
import { until } from '../support/wait.ts';

describe('sandbox webhooks: outbox, signed, at least once', () => {
  let sb: TestSandbox;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;

  beforeAll(async () => {
    receiver = await startReceiver();
    sb = await startTestSandbox({
      webhookUrl: receiver.url,
      dispatcher: { pollMs: 20, baseBackoffMs: 30, maxBackoffMs: 120, maxAttempts: 3, timeoutMs: 2_000 },
    });
  });
  afterAll(async () => {
    await sb?.stop();
    await receiver?.close();
  });
  beforeEach(async () => {
    await sb.call('POST', '/_sandbox/reset');
    receiver.reset();
  });

  const charge = (pm = 'pm_card_visa') =>
    sb.call('POST', '/v1/charges', { body: chargeBody({ payment_method: pm }), key: uniq('k') });
  const events = async (q = '') => (await sb.call('GET', `/_sandbox/webhooks${q}`)).body;

  it('delivers charge.succeeded and charge.failed, signed and verifiable with verifyWebhook', async () => {
    const ok = await charge();
    const declined = await charge('pm_card_chargeDeclined');
    await receiver.waitForRequests(2);
    const byType = Object.fromEntries(receiver.received.map((r) => [r.body.type, r]));
    expect(Object.keys(byType).sort()).toEqual(['charge.failed', 'charge.succeeded']);

    const succeeded = byType['charge.succeeded']!;
    expect(succeeded.body.id).toMatch(/^evt_/);
    expect(Number.isInteger(succeeded.body.created)).toBe(true);
    expect(succeeded.body.data.object).toEqual(ok.body);
    expect(byType['charge.failed']!.body.data.object).toMatchObject({
      id: declined.body.error.charge,
      status: 'failed',
    });

    for (const r of receiver.received) {
      const header = r.headers['onceflow-signature'];
      expect(verifyWebhook(SECRET, r.rawBody, header)).toHaveProperty('timestampSec');
      expect(() => verifyWebhook('whsec_wrong', r.rawBody, header)).toThrow(/signature/);
    }
    const { data: listed } = await until('2 delivered events', () => events('?state=delivered'), {
      done: (b) => b.data.length === 2,
    });
    expect(listed.every((e: Json) => e.deliveries === 1 && e.attempts === 1 && e.last_status === 200)).toBe(
      true,
    );
  });

  it('retries with backoff after the receiver answers 500, then delivers', async () => {
    receiver.setResponder((n) => (n < 2 ? 500 : 200));
    const res = await charge();
    await receiver.waitForRequests(3);
    expect(receiver.received).toHaveLength(1);
    expect(receiver.received[0]!.body.data.object).toMatchObject({ id: res.body.id });
    const {
      data: [event],
    } = await until('1 delivered event', () => events('?state=delivered'), {
      done: (b) => b.data.length === 1,
    });
    expect(event).toMatchObject({ state: 'delivered', attempts: 3, deliveries: 1, last_status: 200 });
  });

  it('keeps exhausted events visible as failed; redeliver re-sends one', async () => {
    receiver.setResponder(() => 503);
    await charge();
    const {
      data: [failed],
    } = await until('1 failed event', () => events('?state=failed'), { done: (b) => b.data.length === 1 });
    expect(failed).toMatchObject({ state: 'failed', attempts: 3, last_status: 503 });
    expect(failed.last_error).toMatch(/503/);
    expect(receiver.count).toBe(3);

    receiver.setResponder(() => 200);
    const redelivered = await sb.call('POST', '/_sandbox/webhooks/redeliver', {
      body: { eventId: failed.id },
    });
    expect(redelivered.status).toBe(200);
    expect(redelivered.body).toMatchObject({ id: failed.id, ok: true, status: 200 });
    expect(receiver.received.map((r) => r.body.id)).toEqual([failed.id]);
    expect((await events('?state=delivered')).data[0]).toMatchObject({ id: failed.id, deliveries: 1 });
    expect(
      (await sb.call('POST', '/_sandbox/webhooks/redeliver', { body: { eventId: 'evt_nope' } })).status,
    ).toBe(404);
  });

  it('duplicate mode delivers every event twice, with the same event id', async () => {
    await sb.call('POST', '/_sandbox/webhooks/config', { body: { duplicate: true } });
    await charge();
    await charge();
    await receiver.waitForRequests(4);
    const ids = receiver.received.map((r) => r.body.id);
    expect(ids).toHaveLength(4);
    expect(new Set(ids).size).toBe(2);
    for (const id of new Set(ids)) expect(ids.filter((x) => x === id)).toHaveLength(2);
    await until('every delivered event delivered twice', () => events('?state=delivered'), {
      done: (b) => b.data.every((e: Json) => e.deliveries === 2),
    });
  });

  it('reorder mode delivers queued events newest first', async () => {
    const cfg = await sb.call('POST', '/_sandbox/webhooks/config', { body: { enabled: false } });
    expect(cfg.body).toMatchObject({ enabled: false, url: receiver.url });
    const created = [];
    for (let i = 0; i < 3; i++) created.push((await charge()).body.id as string);
    const queued = (await events('?state=pending')).data;
    expect(queued.map((e: Json) => e.object_id)).toEqual(created);
    expect(receiver.count).toBe(0);

    await sb.call('POST', '/_sandbox/webhooks/config', { body: { enabled: true, reorder: true } });
    await receiver.waitForRequests(3);
    expect(receiver.received.map((r) => r.body.data.object.id)).toEqual([...created].reverse());
  });

  it('the delivery URL can be changed at runtime and reset to the default with null', async () => {
    const other = await startReceiver();
    try {
      const set = await sb.call('POST', '/_sandbox/webhooks/config', { body: { url: other.url } });
      expect(set.body).toMatchObject({ url: other.url, default_url: receiver.url });
      await charge();
      await other.waitForRequests(1);
      expect(receiver.count).toBe(0);
      const back = await sb.call('POST', '/_sandbox/webhooks/config', { body: { url: null } });
      expect(back.body.url).toBe(receiver.url);
      await charge();
      await receiver.waitForRequests(1);
      expect(other.count).toBe(1);
    } finally {
      await other.close();
    }
  });
});
