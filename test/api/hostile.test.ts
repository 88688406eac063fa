/**
 * Hostile keys and bodies: each gets a 4xx problem, never a 5xx, and nothing
 * is written (orders, ledger records and outbox rows are counted per tenant).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { uniq } from '../support/env.ts';
import { call, newTenant, rawRequest, startApi, tenantCounts, validOrder, type TestApi } from './support.ts';

describe('hostile requests to POST /v1/orders', () => {
  let api: TestApi;
  let t: { tenantId: string; key: string };
  beforeAll(async () => {
    api = await startApi();
    t = await newTenant(api.pool, 'hostile');
  });
  afterAll(async () => api?.close());

  const item = (o: Record<string, unknown>) => ({
    ...validOrder(),
    items: [{ sku: 'S', quantity: 1, unitAmount: 100, ...o }],
  });
  const bodies: Record<string, string> = {
    'invalid JSON': '{"customer":',
    'not an object': '[1,2,3]',
    'a JSON string': '"order"',
    null: 'null',
    'empty object': '{}',
    'trailing garbage': `${JSON.stringify(validOrder())}xyz`,
    'negative amount': JSON.stringify(item({ unitAmount: -1 })),
    'float amount': JSON.stringify(item({ unitAmount: 10.5 })),
    'amount as string': JSON.stringify(item({ unitAmount: '100' })),
    'huge amount': JSON.stringify(item({ unitAmount: 1e300 })),
    // 99 x 10 000 x 1e10 + 1 is past Number.MAX_SAFE_INTEGER: the total would round silently.
    'a total too large to add up exactly': JSON.stringify({
      ...validOrder(),
      items: [
        ...Array.from({ length: 99 }, (_, i) => ({
          sku: `S${i}`,
          quantity: 10_000,
          unitAmount: 10_000_000_000,
        })),
        { sku: 'S-last', quantity: 1, unitAmount: 1 },
      ],
    }),
    'zero quantity': JSON.stringify(item({ quantity: 0 })),
    'float quantity': JSON.stringify(item({ quantity: 1.5 })),
    'quantity as string': JSON.stringify(item({ quantity: '2' })),
    'zero total': JSON.stringify(item({ unitAmount: 0 })),
    'NUL in sku': JSON.stringify(item({ sku: 'a\u0000b' })),
    'control char in sku': JSON.stringify(item({ sku: 'a\u0007b' })),
    'non-ASCII sku': JSON.stringify(item({ sku: 'çafé' })),
    'lone surrogate':
      '{"customer":{"id":"\\ud800","email":"a@example.com"},"currency":"usd","items":[{"sku":"S","quantity":1,"unitAmount":1}],"paymentMethod":"pm"}',
    'NUL in customer id': JSON.stringify({
      ...validOrder(),
      customer: { id: 'c\u0000', email: 'a@example.com' },
    }),
    'bad email': JSON.stringify({ ...validOrder(), customer: { id: 'c', email: 'not-an-email' } }),
    'bad currency': JSON.stringify({ ...validOrder(), currency: 'dollars' }),
    'unknown field': JSON.stringify({ ...validOrder(), tenantId: 'globex' }),
    'no items': JSON.stringify({ ...validOrder(), items: [] }),
    '101 items': JSON.stringify({
      ...validOrder(),
      items: Array.from({ length: 101 }, (_, i) => ({ sku: `S${i}`, quantity: 1, unitAmount: 1 })),
    }),
    'huge array of numbers': JSON.stringify({
      ...validOrder(),
      items: Array.from({ length: 20_000 }, () => 1),
    }),
    'deep nesting': `${'['.repeat(5000)}${']'.repeat(5000)}`,
    'proto pollution':
      '{"__proto__":{"admin":true},"customer":{"id":"c","email":"a@example.com"},"currency":"usd","items":[{"sku":"S","quantity":1,"unitAmount":1}],"paymentMethod":"pm"}',
    'body over 64 KiB': JSON.stringify({ ...validOrder(), pad: 'x'.repeat(70 * 1024) }),
    'empty body': '',
  };

  for (const [name, raw] of Object.entries(bodies)) {
    it(`body: ${name} -> 4xx problem, nothing written`, async () => {
      const before = await tenantCounts(api.pool, t.tenantId);
      const res = await call(api, 'POST', '/v1/orders', {
        key: t.key,
        idem: uniq('h'),
        raw,
        headers: { 'content-type': 'application/json' },
      });
      expect(res.status).toBeGreaterThanOrEqual(400);
      expect(res.status).toBeLessThan(500);
      expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(res.text).not.toMatch(/\bat \S+\.(ts|js):\d+|SELECT|INSERT|node_modules/i);
      expect(await tenantCounts(api.pool, t.tenantId)).toEqual(before);
    });
  }

  it('the Bearer scheme name is case-insensitive', async () => {
    const res = await call(api, 'POST', '/v1/orders', {
      idem: uniq('h'),
      body: validOrder(),
      headers: { authorization: `bearer ${t.key}` },
    });
    expect(res.status).toBe(202);
  });

  it('a 64 KiB+ body is 413', async () => {
    const res = await call(api, 'POST', '/v1/orders', {
      key: t.key,
      idem: uniq('h'),
      raw: JSON.stringify({ ...validOrder(), pad: 'x'.repeat(70 * 1024) }),
    });
    expect(res.status).toBe(413);
  });

  it('wrong content types are 415', async () => {
    const before = await tenantCounts(api.pool, t.tenantId);
    for (const ct of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
      const res = await call(api, 'POST', '/v1/orders', {
        key: t.key,
        idem: uniq('h'),
        raw: JSON.stringify(validOrder()),
        headers: { 'content-type': ct },
      });
      expect(res.status).toBe(415);
    }
    expect(await tenantCounts(api.pool, t.tenantId)).toEqual(before);
  });

  it('hostile Idempotency-Keys and auth headers over a raw socket: 4xx, never 5xx, nothing written', async () => {
    const before = await tenantCounts(api.pool, t.tenantId);
    const body = JSON.stringify(validOrder());
    const keys = ['x'.repeat(256), 'x'.repeat(10_000), 'a\x00b', 'a\x1fb', 'a\x7fb', '\xff\xfe', 'a b', 'é'];
    for (const k of keys) {
      const res = await rawRequest(
        api,
        `POST /v1/orders HTTP/1.1\r\nAuthorization: Bearer ${t.key}\r\nContent-Type: application/json\r\nIdempotency-Key: ${k}\r\n`,
        body,
      );
      expect(res.status, JSON.stringify(k)).toBeGreaterThanOrEqual(400);
      expect(res.status).toBeLessThan(500);
    }
    for (const auth of ['Bearer \x00', 'Bearer \xff', `Bearer ${'a'.repeat(5000)}`, 'Bearer a b']) {
      const res = await rawRequest(
        api,
        `POST /v1/orders HTTP/1.1\r\nAuthorization: ${auth}\r\nContent-Type: application/json\r\nIdempotency-Key: ok-1\r\n`,
        body,
      );
      expect(res.status).toBeGreaterThanOrEqual(400);
      expect(res.status).toBeLessThan(500);
    }
    const lies = await rawRequest(
      api,
      `POST /v1/orders HTTP/1.1\r\nAuthorization: Bearer ${t.key}\r\nContent-Type: application/json\r\nIdempotency-Key: ok-2\r\nContent-Length: 99999\r\n`,
      body,
    );
    expect(lies.status).toBeGreaterThanOrEqual(400);
    expect(lies.status).toBeLessThan(500);
    expect(await tenantCounts(api.pool, t.tenantId)).toEqual(before);
  });

  it('hostile ids and query strings on GET are 4xx', async () => {
    for (const path of [
      '/v1/orders/%00',
      `/v1/orders/${'a'.repeat(500)}`,
      '/v1/orders/%C3%A9',
      '/v1/orders/x?wait=-1',
      '/v1/orders/x?wait=abc',
      '/v1/orders?limit=1000000',
      '/v1/orders?cursor=%00',
      `/v1/orders?cursor=${'A'.repeat(1000)}`,
      // Well-formed but tampered cursors whose timestamps overflow Postgres.
      `/v1/orders?cursor=${Buffer.from('99999999999999999999.ord_x').toString('base64url')}`,
      `/v1/orders?cursor=${Buffer.from('9223372036854775807.ord_x').toString('base64url')}`,
      '/v1/orders?status=paid&status=accepted',
    ]) {
      const res = await call(api, 'GET', path, { key: t.key });
      expect(res.status, path).toBeGreaterThanOrEqual(400);
      expect(res.status, path).toBeLessThan(500);
    }
  });
});
