import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { uniq } from '../support/env.ts';
import { createSandboxEmailProvider, createSandboxPaymentProvider } from '../../src/providers/sandbox.ts';
import { ProviderError, type ChargeRequest } from '../../src/providers/types.ts';
import { chargeBody, startTestSandbox, type TestSandbox, type Json } from './harness.ts';
import { until } from '../support/wait.ts';

describe('sandbox fault injection', () => {
  let sb: TestSandbox;
  beforeAll(async () => {
    sb = await startTestSandbox({ dispatch: false });
  });
  afterAll(async () => {
    await sb?.stop();
  });
  beforeEach(async () => {
    expect((await sb.call('DELETE', '/_sandbox/faults')).status).toBe(200);
  });

  const fault = async (body: Record<string, unknown>) => {
    const res = await sb.call('POST', '/_sandbox/faults', { body });
    expect(res.status).toBe(201);
    return res.body;
  };
  const charges = async (orderId: string) =>
    (await sb.call('GET', `/_sandbox/charges?order_id=${orderId}`)).body.data as Json[];
  const payments = () => createSandboxPaymentProvider({ baseUrl: sb.url, timeoutMs: 5_000 });
  const req = (orderId = uniq('ord')): ChargeRequest => ({
    amount: 500,
    currency: 'eur',
    paymentMethod: 'pm_card_visa',
    metadata: { order_id: orderId, tenant_id: 't' },
  });

  it('fail_before: 500 and nothing happens; a retry with the same key runs for real', async () => {
    await fault({ endpoint: 'charges.create', kind: 'fail_before', count: 1 });
    const body = chargeBody();
    const key = uniq('k');
    const res = await sb.call('POST', '/v1/charges', { body, key });
    expect(res.status).toBe(500);
    expect(res.body.error.type).toBe('api_error');
    expect(await charges(body.metadata.order_id)).toHaveLength(0);
    const { rows } = await sb.pool.query(
      `select 1 from sandbox.idempotency_keys where account = $1 and key = $2`,
      [sb.account, key],
    );
    expect(rows).toHaveLength(0);
    const retry = await sb.call('POST', '/v1/charges', { body, key });
    expect(retry.status).toBe(200);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect(await charges(body.metadata.order_id)).toHaveLength(1);
  });

  it('fail_after: the charge is committed, then 500; the retry replays the original charge', async () => {
    await fault({ endpoint: 'charges.create', kind: 'fail_after', count: 1 });
    const body = chargeBody();
    const key = uniq('k');
    const res = await sb.call('POST', '/v1/charges', { body, key });
    expect(res.status).toBe(500);
    const rows = await charges(body.metadata.order_id);
    expect(rows).toHaveLength(1);
    const retry = await sb.call('POST', '/v1/charges', { body, key });
    expect(retry.status).toBe(200);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.body.id).toBe(rows[0].id);
    expect(await charges(body.metadata.order_id)).toHaveLength(1);
  });

  it('drop_after: the charge happens, the connection is cut; the client reports uncertain; lookup finds it', async () => {
    await fault({ endpoint: 'charges.create', kind: 'drop_after', count: 1 });
    const r = req();
    const key = uniq('k');
    const err = await payments()
      .createCharge(r, key)
      .then(
        () => null,
        (e: unknown) => e,
      );
    expect(err).toBeInstanceOf(ProviderError);
    expect(err).toMatchObject({ kind: 'uncertain', definite: false, code: 'network' });
    const rows = await charges(r.metadata.order_id!);
    expect(rows).toHaveLength(1);
    const found = await payments().findChargeByIdempotencyKey(key);
    expect(found).toMatchObject({ id: rows[0].id, status: 'succeeded', idempotencyKey: key, amount: 500 });
    const retried = await payments().createCharge(r, key);
    expect(retried.id).toBe(rows[0].id);
    expect(await charges(r.metadata.order_id!)).toHaveLength(1);
  });

  it('delay: waits delayMs, then behaves normally', async () => {
    await fault({ endpoint: 'charges.create', kind: 'delay', count: 1, delayMs: 600 });
    const started = Date.now();
    const res = await sb.call('POST', '/v1/charges', { body: chargeBody(), key: uniq('k') });
    expect(Date.now() - started).toBeGreaterThanOrEqual(580);
    expect(res.status).toBe(200);
    // The fault was for one request: it is used up, and the next request is plain.
    const left = (await sb.call('GET', '/_sandbox/faults')).body.data as Json[];
    expect(left.filter((f) => f.kind === 'delay' && (f.remaining as number) > 0)).toEqual([]);
    expect((await sb.call('POST', '/v1/charges', { body: chargeBody(), key: uniq('k') })).status).toBe(200);
  });

  it('delay longer than the client timeout: uncertain for the client, yet the charge happens later', async () => {
    await fault({ endpoint: 'charges.create', kind: 'delay', count: 1, delayMs: 800 });
    const r = req();
    const key = uniq('k');
    const impatient = createSandboxPaymentProvider({ baseUrl: sb.url, timeoutMs: 150 });
    await expect(impatient.createCharge(r, key)).rejects.toMatchObject({
      kind: 'uncertain',
      code: 'timeout',
    });
    // While the first request still holds the key, a retry is told to come back later.
    await expect(payments().createCharge(r, key)).rejects.toMatchObject({ kind: 'in_progress', status: 409 });
    const found = await until('the charge under the key at the provider', () =>
      payments().findChargeByIdempotencyKey(key),
    );
    expect(found.status).toBe('succeeded');
    expect(await charges(r.metadata.order_id!)).toHaveLength(1);
  });

  it('fault counts are consumed atomically: 20 concurrent requests, count 3 -> exactly 3 failures', async () => {
    const orderId = uniq('ord');
    await fault({ endpoint: 'charges.create', kind: 'fail_before', count: 3 });
    const replies = await Promise.all(
      Array.from({ length: 20 }, () =>
        sb.call('POST', '/v1/charges', {
          body: chargeBody({ metadata: { order_id: orderId } }),
          key: uniq('k'),
        }),
      ),
    );
    expect(replies.filter((r) => r.status === 500)).toHaveLength(3);
    expect(replies.filter((r) => r.status === 200)).toHaveLength(17);
    expect(await charges(orderId)).toHaveLength(17);
    const list = (await sb.call('GET', '/_sandbox/faults')).body.data;
    expect(list).toHaveLength(1);
    expect(list[0]).toMatchObject({ endpoint: 'charges.create', kind: 'fail_before', remaining: 0 });
  });

  it('a count-1 fault is taken by exactly one of many concurrent requests', async () => {
    await fault({ endpoint: 'messages.create', kind: 'fail_after', count: 1 });
    const orderId = uniq('ord');
    const replies = await Promise.all(
      Array.from({ length: 12 }, () =>
        sb.call('POST', '/v1/messages', {
          body: { to: 'a@example.com', subject: 's', text: 't', metadata: { order_id: orderId } },
          key: uniq('k'),
        }),
      ),
    );
    expect(replies.filter((r) => r.status === 500)).toHaveLength(1);
    expect(replies.filter((r) => r.status === 200)).toHaveLength(11);
    // fail_after: all 12 messages were really sent.
    expect((await sb.call('GET', `/_sandbox/messages?order_id=${orderId}`)).body.data).toHaveLength(12);
  });

  it('faults are per endpoint and applied in order; DELETE clears them', async () => {
    await fault({ endpoint: 'charges.lookup', kind: 'fail_before', count: 1 });
    await fault({ endpoint: 'charges.lookup', kind: 'drop_after', count: 1 });
    const r = req();
    const key = uniq('k');
    await payments().createCharge(r, key); // charges.create is unaffected
    await expect(payments().findChargeByIdempotencyKey(key)).rejects.toMatchObject({
      kind: 'uncertain',
      status: 500,
    });
    await expect(payments().findChargeByIdempotencyKey(key)).rejects.toMatchObject({
      kind: 'uncertain',
      code: 'network',
    });
    expect(await payments().findChargeByIdempotencyKey(key)).toMatchObject({ idempotencyKey: key });

    await fault({ endpoint: 'messages.lookup', kind: 'fail_before', count: 5 });
    expect(
      (await sb.call('GET', '/_sandbox/faults')).body.data.filter((f: Json) => f.remaining > 0),
    ).toHaveLength(1);
    expect((await sb.call('DELETE', '/_sandbox/faults')).body.deleted).toBe(3);
    const email = createSandboxEmailProvider({ baseUrl: sb.url, timeoutMs: 5_000 });
    expect(await email.findMessageByIdempotencyKey(uniq('none'))).toBeNull();
  });

  it('validates fault requests', async () => {
    expect(
      (await sb.call('POST', '/_sandbox/faults', { body: { endpoint: 'charges.create', kind: 'delay' } }))
        .status,
    ).toBe(400);
    expect(
      (await sb.call('POST', '/_sandbox/faults', { body: { endpoint: 'nope', kind: 'fail_before' } })).status,
    ).toBe(400);
    expect(
      (
        await sb.call('POST', '/_sandbox/faults', {
          body: { endpoint: 'charges.create', kind: 'fail_before', count: 0 },
        })
      ).status,
    ).toBe(400);
  });
});
