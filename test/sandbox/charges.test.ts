import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { uniq } from '../support/env.ts';
import http from 'node:http';
import { chargeBody, startTestSandbox, type TestSandbox, type Json } from './harness.ts';
import { until } from '../support/wait.ts';

/** node:http, so the test controls the raw header bytes (fetch refuses some of them). */
function rawPost(baseUrl: string, path: string, body: unknown, key: string | string[] | undefined) {
  return new Promise<{ status: number; text: string }>((resolve, reject) => {
    const headers: http.OutgoingHttpHeaders = { 'content-type': 'application/json' };
    if (key !== undefined)
      headers['idempotency-key'] = Array.isArray(key) ? key : Buffer.from(key, 'latin1').toString('latin1');
    const req = http.request(new URL(path, baseUrl), { method: 'POST', headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
    });
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

describe('sandbox payments: Idempotency-Key semantics on real Postgres and HTTP', () => {
  let sb: TestSandbox;
  beforeAll(async () => {
    sb = await startTestSandbox({ dispatch: false });
  });
  afterAll(async () => {
    await sb?.stop();
  });

  const audit = async (q: string) => (await sb.call('GET', `/_sandbox/charges?${q}`)).body.data as Json[];

  it('same key + same params replays the original status and body with Idempotent-Replayed', async () => {
    const key = uniq('k');
    const body = chargeBody();
    const first = await sb.call('POST', '/v1/charges', { body, key });
    expect(first.status).toBe(200);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(first.body).toMatchObject({
      object: 'charge',
      amount: 1999,
      currency: 'usd',
      status: 'succeeded',
      payment_method: 'pm_card_visa',
      metadata: body.metadata,
      idempotency_key: key,
    });
    expect(first.body.id).toMatch(/^ch_/);
    expect(Number.isInteger(first.body.created)).toBe(true);

    // Key order in the JSON doesn't change the fingerprint.
    const reordered = Object.fromEntries(Object.entries(body).reverse());
    const second = await sb.call('POST', '/v1/charges', { body: reordered, key });
    expect(second.status).toBe(200);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(second.body).toEqual(first.body);
    expect(await audit(`idempotency_key=${key}`)).toHaveLength(1);
  });

  it('same key + different params is a 400 idempotency_error and makes no second charge', async () => {
    const key = uniq('k');
    const body = chargeBody();
    expect((await sb.call('POST', '/v1/charges', { body, key })).status).toBe(200);
    const res = await sb.call('POST', '/v1/charges', { body: { ...body, amount: 2000 }, key });
    expect(res.status).toBe(400);
    expect(res.body.error.type).toBe('idempotency_error');
    expect(res.headers.get('idempotent-replayed')).toBeNull();
    expect(await audit(`idempotency_key=${key}`)).toHaveLength(1);
  });

  it('keys are scoped per provider: the same key on /v1/messages is independent', async () => {
    const key = uniq('k');
    expect((await sb.call('POST', '/v1/charges', { body: chargeBody(), key })).status).toBe(200);
    const msg = await sb.call('POST', '/v1/messages', {
      body: { to: 'a@example.com', subject: 's', text: 't' },
      key,
    });
    expect(msg.status).toBe(200);
    expect(msg.headers.get('idempotent-replayed')).toBeNull();
  });

  it('a missing, empty, repeated, too long or non-ASCII Idempotency-Key is a 400 and nothing is stored', async () => {
    const body = chargeBody();
    const cases: (string | string[] | undefined)[] = [
      undefined,
      '',
      'has space',
      'x'.repeat(256),
      'caf\u00e9',
      ['a', 'b'],
    ];
    for (const key of cases) {
      const res = await rawPost(sb.url, '/v1/charges', body, key);
      expect(res.status, JSON.stringify(key)).toBe(400);
      expect(JSON.parse(res.text).error.type).toBe('invalid_request_error');
    }
    expect(await audit(`order_id=${body.metadata.order_id}`)).toHaveLength(0);
    expect((await rawPost(sb.url, '/v1/charges', body, 'x'.repeat(255))).status).toBe(200);
  });

  it('rejects invalid bodies with 400 invalid_request_error, no stack trace, nothing stored', async () => {
    const bad = [
      chargeBody({ amount: '1999' }), // a string is not coerced
      chargeBody({ amount: 19.99 }), // money is integer minor units
      chargeBody({ amount: 0 }),
      chargeBody({ currency: 'USD' }),
      chargeBody({ metadata: { order_id: 7 } }),
      chargeBody({ extra: true }),
    ];
    for (const body of bad) {
      const key = uniq('k');
      const res = await sb.call('POST', '/v1/charges', { body, key });
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.error.type).toBe('invalid_request_error');
      expect(res.text).not.toMatch(/at .*\.ts:\d+/);
      // Not stored: the same key with a valid body runs normally.
      const ok = await sb.call('POST', '/v1/charges', { body: chargeBody(), key });
      expect(ok.status).toBe(200);
      expect(ok.headers.get('idempotent-replayed')).toBeNull();
    }
    const junk = await sb.call('POST', '/v1/charges', { body: '{not json', key: uniq('k') });
    expect(junk.status).toBe(400);
    expect(junk.body.error.type).toBe('invalid_request_error');
  });

  it('an unknown payment method is a 400 with no effect, and the key stays unused', async () => {
    const key = uniq('k');
    const body = chargeBody({ payment_method: 'pm_card_unknown' });
    const res = await sb.call('POST', '/v1/charges', { body, key });
    expect(res.status).toBe(400);
    expect(res.body.error.type).toBe('invalid_request_error');
    expect(await audit(`order_id=${body.metadata.order_id}`)).toHaveLength(0);
    const proto = await sb.call('POST', '/v1/charges', {
      body: chargeBody({ payment_method: 'toString' }),
      key,
    });
    expect(proto.status).toBe(400);
    expect((await sb.call('POST', '/v1/charges', { body: chargeBody(), key })).status).toBe(200);
  });

  it('a declined card is a 402 card_error, a failed charge exists, and the 402 is replayed', async () => {
    const key = uniq('k');
    const body = chargeBody({ payment_method: 'pm_card_chargeDeclined' });
    const res = await sb.call('POST', '/v1/charges', { body, key });
    expect(res.status).toBe(402);
    expect(res.body.error).toMatchObject({ type: 'card_error', code: 'card_declined' });
    expect(res.body.error.charge).toMatch(/^ch_/);
    const rows = await audit(`order_id=${body.metadata.order_id}`);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({
      id: res.body.error.charge,
      status: 'failed',
      failure_code: 'card_declined',
    });

    const again = await sb.call('POST', '/v1/charges', { body, key });
    expect(again.status).toBe(402);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body).toEqual(res.body);
    expect(await audit(`order_id=${body.metadata.order_id}`)).toHaveLength(1);
  });

  it('looks a charge up by its idempotency key (reconciliation), 404 when there is none', async () => {
    const key = uniq('k/with spaces&symbols');
    const created = await sb.call('POST', '/v1/charges', { body: chargeBody(), key: key.replace(/ /g, '_') });
    const found = await sb.call(
      'GET',
      `/v1/charges?idempotency_key=${encodeURIComponent(key.replace(/ /g, '_'))}`,
    );
    expect(found.status).toBe(200);
    expect(found.body).toEqual(created.body);
    const missing = await sb.call('GET', `/v1/charges?idempotency_key=${uniq('nope')}`);
    expect(missing.status).toBe(404);
    expect(missing.body.error.code).toBe('resource_missing');
    expect((await sb.call('GET', '/v1/charges')).status).toBe(400);
  });

  it('20 concurrent requests with one key make exactly one charge; the rest replay or get 409', async () => {
    const key = uniq('k');
    const body = chargeBody();
    const replies = await Promise.all(
      Array.from({ length: 20 }, () => sb.call('POST', '/v1/charges', { body, key })),
    );
    const statuses = replies.map((r) => r.status);
    expect(statuses.every((s) => s === 200 || s === 409)).toBe(true);
    const fresh = replies.filter((r) => r.status === 200 && r.headers.get('idempotent-replayed') === null);
    expect(fresh).toHaveLength(1);
    const ids = new Set(replies.filter((r) => r.status === 200).map((r) => r.body.id));
    expect(ids.size).toBe(1);
    for (const r of replies.filter((x) => x.status === 409)) {
      expect(r.body.error.type).toBe('idempotency_error');
      expect(r.headers.get('retry-after')).toBe('1');
    }
    expect(await audit(`order_id=${body.metadata.order_id}`)).toHaveLength(1);
  });

  it('a request while the first with the same key is still processing gets 409, then the replay', async () => {
    const key = uniq('k');
    const body = chargeBody();
    await sb.call('POST', '/_sandbox/faults', {
      body: { endpoint: 'charges.create', kind: 'delay', count: 1, delayMs: 1500 },
    });
    const slow = sb.call('POST', '/v1/charges', { body, key });
    // Hold the mid-flight state: wait until the slow request owns the key.
    await until('the slow request to own the key (state processing)', async () => {
      const { rows } = await sb.pool.query(
        `select state from sandbox.idempotency_keys where account = $1 and scope = 'charges' and key = $2`,
        [sb.account, key],
      );
      return rows[0]?.state === 'processing';
    });
    const during = await Promise.all(
      Array.from({ length: 5 }, () => sb.call('POST', '/v1/charges', { body, key })),
    );
    expect(during.map((r) => r.status)).toEqual([409, 409, 409, 409, 409]);
    expect(during[0]!.body.error.code).toBe('idempotency_key_in_use');
    // The lookup doesn't see a charge yet: it has not happened.
    expect((await sb.call('GET', `/v1/charges?idempotency_key=${key}`)).status).toBe(404);

    const first = await slow;
    expect(first.status).toBe(200);
    const after = await sb.call('POST', '/v1/charges', { body, key });
    expect(after.status).toBe(200);
    expect(after.headers.get('idempotent-replayed')).toBe('true');
    expect(after.body.id).toBe(first.body.id);
    expect(await audit(`order_id=${body.metadata.order_id}`)).toHaveLength(1);
  });

  it('audit lists every charge with its key and order, filterable by order_id and tenant_id', async () => {
    const orderId = uniq('ord');
    const k1 = uniq('k');
    const k2 = uniq('k');
    await sb.call('POST', '/v1/charges', {
      body: chargeBody({ metadata: { order_id: orderId, tenant_id: 't1' } }),
      key: k1,
    });
    await sb.call('POST', '/v1/charges', {
      body: chargeBody({
        payment_method: 'pm_card_chargeDeclined',
        metadata: { order_id: orderId, tenant_id: 't1' },
      }),
      key: k2,
    });
    await sb.call('POST', '/v1/charges', { body: chargeBody(), key: uniq('k') });
    const rows = await audit(`order_id=${orderId}`);
    expect(rows.map((r) => [r.idempotency_key, r.status, r.order_id, r.tenant_id, r.amount])).toEqual([
      [k1, 'succeeded', orderId, 't1', 1999],
      [k2, 'failed', orderId, 't1', 1999],
    ]);
    expect(typeof rows[0].created_at).toBe('string');
    expect((await audit(`tenant_id=t1&order_id=${orderId}`)).length).toBe(2);
  });
});

describe('sandbox payments: key retention window (24 h)', () => {
  let sb: TestSandbox;
  let clock = new Date('2030-01-01T00:00:00Z');
  beforeAll(async () => {
    sb = await startTestSandbox({ dispatch: false, now: () => clock });
  });
  afterAll(async () => {
    await sb?.stop();
  });

  it('replays within 24 h and treats an older key as new', async () => {
    const key = uniq('k');
    const body = chargeBody();
    const first = await sb.call('POST', '/v1/charges', { body, key });
    clock = new Date(clock.getTime() + 23 * 3600_000);
    const within = await sb.call('POST', '/v1/charges', { body: { ...body, amount: 5 }, key });
    expect(within.status).toBe(400); // still remembered: a mismatch
    clock = new Date(clock.getTime() + 2 * 3600_000);
    const later = await sb.call('POST', '/v1/charges', { body: { ...body, amount: 5 }, key });
    expect(later.status).toBe(200);
    expect(later.headers.get('idempotent-replayed')).toBeNull();
    expect(later.body.id).not.toBe(first.body.id);
    // Lookup returns the most recent charge made under the key.
    expect((await sb.call('GET', `/v1/charges?idempotency_key=${key}`)).body.id).toBe(later.body.id);
  });
});

describe('sandbox email', () => {
  let sb: TestSandbox;
  beforeAll(async () => {
    sb = await startTestSandbox({ dispatch: false });
  });
  afterAll(async () => {
    await sb?.stop();
  });

  it('sends once per key, replays, rejects changed params, and is found by key', async () => {
    const key = uniq('k');
    const orderId = uniq('ord');
    const body = {
      to: 'buyer@example.com',
      subject: 'Receipt',
      text: 'Thanks',
      metadata: { order_id: orderId },
    };
    const first = await sb.call('POST', '/v1/messages', { body, key });
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({
      object: 'message',
      status: 'sent',
      to: 'buyer@example.com',
      idempotency_key: key,
    });
    expect(first.body.id).toMatch(/^msg_/);
    const replay = await sb.call('POST', '/v1/messages', { body, key });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body).toEqual(first.body);
    const changed = await sb.call('POST', '/v1/messages', { body: { ...body, text: 'other' }, key });
    expect(changed.status).toBe(400);
    expect(changed.body.error.type).toBe('idempotency_error');
    expect((await sb.call('GET', `/v1/messages?idempotency_key=${key}`)).body).toEqual(first.body);
    expect((await sb.call('GET', `/v1/messages?idempotency_key=${uniq('x')}`)).status).toBe(404);
    const audit = await sb.call('GET', `/_sandbox/messages?order_id=${orderId}`);
    expect(audit.body.data).toHaveLength(1);
    expect(audit.body.data[0]).toMatchObject({ id: first.body.id, idempotency_key: key, order_id: orderId });
    expect(
      (await sb.call('POST', '/v1/messages', { body: { ...body, to: 'not-an-email' }, key: uniq('k') }))
        .status,
    ).toBe(400);
  });

  it('concurrent sends with one key send exactly one message', async () => {
    const key = uniq('k');
    const orderId = uniq('ord');
    const body = {
      to: 'buyer@example.com',
      subject: 'Receipt',
      text: 'Thanks',
      metadata: { order_id: orderId },
    };
    const replies = await Promise.all(
      Array.from({ length: 15 }, () => sb.call('POST', '/v1/messages', { body, key })),
    );
    expect(replies.every((r) => r.status === 200 || r.status === 409)).toBe(true);
    expect(replies.filter((r) => r.status === 200 && !r.headers.get('idempotent-replayed'))).toHaveLength(1);
    expect((await sb.call('GET', `/_sandbox/messages?order_id=${orderId}`)).body.data).toHaveLength(1);
  });

  it('reset wipes this account only', async () => {
    const other = await startTestSandbox({ dispatch: false });
    try {
      const key = uniq('k');
      await other.call('POST', '/v1/charges', { body: chargeBody(), key });
      await sb.call('POST', '/v1/charges', { body: chargeBody(), key });
      expect((await sb.call('POST', '/_sandbox/reset')).body).toEqual({ reset: true, account: sb.account });
      expect((await sb.call('GET', '/_sandbox/charges')).body.data).toHaveLength(0);
      expect((await sb.call('GET', '/_sandbox/messages')).body.data).toHaveLength(0);
      expect((await other.call('GET', '/_sandbox/charges')).body.data).toHaveLength(1);
      // The key is gone: it runs as new.
      const again = await sb.call('POST', '/v1/charges', { body: chargeBody(), key });
      expect(again.headers.get('idempotent-replayed')).toBeNull();
    } finally {
      await other.stop();
    }
  });
});
