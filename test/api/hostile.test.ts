/**
 * Hostile keys and bodies: each gets a 4xx problem, never a 5xx, and nothing
 * is written (orders, ledger records and outbox rows are counted per tenant).
 */
import http from 'node:http';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_ORDER_TOTAL } from '../../src/api/schemas.ts';
import { CreateChargeBody } from '../../dev/sandbox/schemas.ts';
import { uniq } from '../support/env.ts';
import {
  PROBLEM,
  call,
  newTenant,
  rawRequest,
  startApi,
  tenantCounts,
  validOrder,
  type TestApi,
} from './support.ts';

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

/** A raw client on 127.0.0.1: resolves with what the server sent once the server closes the connection. */
function openSocket(api: { url: string }, localAddress?: string) {
  const { port } = new URL(api.url);
  const socket = net.connect({
    host: '127.0.0.1',
    port: Number(port),
    ...(localAddress ? { localAddress } : {}),
  });
  const chunks: Buffer[] = [];
  socket.on('data', (c) => chunks.push(c));
  socket.on('error', () => undefined); // a reset is also a close
  const closed = new Promise<string>((resolve) =>
    socket.once('close', () => resolve(Buffer.concat(chunks).toString('latin1'))),
  );
  const connected = new Promise<void>((resolve) => socket.once('connect', () => resolve()));
  return { socket, closed, connected };
}

/** Writes one byte every `everyMs` until the socket closes (the server's doing) or the test ends. */
function trickle(socket: net.Socket, everyMs = 50): () => void {
  const timer = setInterval(() => {
    if (!socket.destroyed && socket.writable) socket.write('x');
  }, everyMs);
  socket.once('close', () => clearInterval(timer));
  return () => clearInterval(timer);
}

describe('slow clients are cut off within the configured bounds', () => {
  let api: TestApi;
  let t: { tenantId: string; key: string };
  beforeAll(async () => {
    api = await startApi({
      env: { API_HEADERS_TIMEOUT_MS: '300', API_REQUEST_TIMEOUT_MS: '600', API_MAX_CONNECTIONS: '40' },
    });
    t = await newTenant(api.pool, 'slow');
  });
  afterAll(async () => api?.close());

  it('a body trickled to the webhook (well-formed signature header) gets 408 and the connection is closed', async () => {
    const { socket, closed, connected } = openSocket(api);
    await connected;
    socket.write(
      `POST /v1/webhooks/payments HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
        `Onceflow-Signature: t=${Math.floor(Date.now() / 1000)},v1=${'0'.repeat(64)}\r\nContent-Length: 60000\r\n\r\n{`,
    );
    const stop = trickle(socket);
    const received = await closed;
    stop();
    expect(received).toMatch(/^HTTP\/1\.1 408 /);
    expect(received).toMatch(/application\/problem\+json/);
  });

  it('headers trickled byte by byte (slowloris) get 408 and the connection is closed', async () => {
    const { socket, closed, connected } = openSocket(api);
    await connected;
    socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ');
    const stop = trickle(socket);
    const received = await closed;
    stop();
    expect(received).toMatch(/^HTTP\/1\.1 408 /);
  });

  it('an unauthenticated POST /v1/orders gets its 401 with Connection: close and is closed while the body still trickles', async () => {
    const { socket, closed, connected } = openSocket(api);
    await connected;
    socket.write(
      `POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nIdempotency-Key: k1\r\n` +
        `Authorization: Bearer sk_test_nope\r\nContent-Length: 100000\r\n\r\n{`,
    );
    const stop = trickle(socket);
    const received = await closed;
    stop();
    expect(received).toMatch(/^HTTP\/1\.1 401 /);
    expect(received).toMatch(/\r\nconnection: close\r\n/i);
  });

  it('a webhook without a signature header is refused before its body, with Connection: close', async () => {
    const { socket, closed, connected } = openSocket(api);
    await connected;
    socket.write(
      `POST /v1/webhooks/payments HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{`,
    );
    const stop = trickle(socket);
    const received = await closed;
    stop();
    expect(received).toMatch(/^HTTP\/1\.1 401 /);
    expect(received).toMatch(/invalid-webhook-signature/);
    expect(received).toMatch(/\r\nconnection: close\r\n/i);
  });

  it('an authenticated request that arrives in time is unaffected', async () => {
    const res = await call(api, 'POST', '/v1/orders', { key: t.key, idem: uniq('h'), body: validOrder() });
    expect(res.status).toBe(202);
  });
});

describe('the connection count is bounded', () => {
  let api: TestApi;
  beforeAll(async () => {
    api = await startApi({ env: { API_MAX_CONNECTIONS: '3' } });
  });
  afterAll(async () => api?.close());

  it('connections past API_MAX_CONNECTIONS are dropped at accept; a freed slot is usable again', async () => {
    const held = [openSocket(api), openSocket(api), openSocket(api)];
    await Promise.all(held.map((h) => h.connected));
    await expect
      .poll(() => new Promise<number>((r) => api.app.server.getConnections((_e, n) => r(n))))
      .toBe(3);
    const extra = openSocket(api);
    extra.socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
    expect(await extra.closed).toBe(''); // closed without a byte of response
    held[0]!.socket.destroy();
    await held[0]!.closed;
    await expect
      .poll(() => new Promise<number>((r) => api.app.server.getConnections((_e, n) => r(n))))
      .toBe(2);
    const again = await rawRequest(api, 'GET /healthz HTTP/1.1\r\n');
    expect(again.status).toBe(200);
    for (const h of held) h.socket.destroy();
  });
});

/** GET over a socket bound to `localAddress` (another loopback address: another client). */
function getFrom(api: { url: string }, path: string, key: string, localAddress: string) {
  const { port } = new URL(api.url);
  return new Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }>(
    (resolve, reject) => {
      const req = http.request(
        {
          host: '127.0.0.1',
          port: Number(port),
          path,
          localAddress,
          agent: false,
          headers: { authorization: `Bearer ${key}` },
        },
        (res) => {
          let body = '';
          res.on('data', (d: Buffer) => (body += d.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
        },
      );
      req.on('error', reject);
      req.end();
    },
  );
}

describe('failed untagged API keys are throttled per client address (tagged keys: api-key-auth.test.ts)', () => {
  let api: TestApi;
  beforeAll(async () => {
    api = await startApi({ env: { API_AUTH_FAILURE_MAX: '5', API_AUTH_FAILURE_WINDOW_MS: '60000' } });
  });
  afterAll(async () => api?.close());

  it('many bad untagged keys from one address get 429 with Retry-After; other clients and known tenants are unaffected', async () => {
    const known = await newTenant(api.pool, 'thr-known');
    const other = await newTenant(api.pool, 'thr-other');
    const guesser = '127.0.0.3';
    // A tenant on the guesser's address whose key was verified before the flood.
    expect((await getFrom(api, '/v1/orders?limit=1', known.key, guesser)).status).toBe(200);

    const statuses: number[] = [];
    for (let i = 0; i < 30; i++) {
      statuses.push((await getFrom(api, '/v1/orders', `sk_test_guess_${i}`, guesser)).status);
    }
    expect(statuses.slice(0, 5)).toEqual([401, 401, 401, 401, 401]);
    expect(new Set(statuses.slice(5))).toEqual(new Set([429]));

    const limited = await getFrom(api, '/v1/orders', 'sk_test_guess_more', guesser);
    expect(limited.status).toBe(429);
    expect(limited.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(JSON.parse(limited.body)).toMatchObject({ type: `${PROBLEM}rate-limited`, status: 429 });
    expect(Number(limited.headers['retry-after'])).toBeGreaterThan(0);
    // A missing key costs no lookup, so it is a plain 401 and counts toward nothing.
    expect((await getFrom(api, '/v1/orders', '', guesser)).status).toBe(401);

    // Another tenant on another address: unaffected.
    expect((await getFrom(api, '/v1/orders?limit=1', other.key, '127.0.0.4')).status).toBe(200);
    // The known tenant on the guesser's address: still served (its key is known-good).
    expect((await getFrom(api, '/v1/orders?limit=1', known.key, guesser)).status).toBe(200);
  });
});

describe('every error is problem+json and never echoes the URL', () => {
  let api: TestApi;
  let t: { tenantId: string; key: string };
  beforeAll(async () => {
    api = await startApi();
    t = await newTenant(api.pool, 'fmt');
  });
  afterAll(async () => api?.close());

  const marker = 'zqxmarker';
  it.each([
    ['a bad %-escape', `/v1/orders/${marker}%ff`, 400],
    ['an over-long path parameter', `/v1/orders/${marker}${'a'.repeat(500)}`, 400],
    ['an unknown route', `/${marker}/nope`, 404],
    ['an unknown route with a bad %-escape', `/${marker}%ff`, 400],
  ])('%s', async (_name, path, status) => {
    const res = await call(api, 'GET', path, { key: t.key });
    expect(res.status).toBe(status);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(res.body).toMatchObject({
      type: expect.stringMatching(/^https:\/\/onceflow\.dev\/problems\//),
      status,
    });
    expect(res.text).not.toContain(marker);
    expect(res.text).not.toMatch(/FST_ERR/);
  });

  it.each([
    '/v1/orders?limit=100.5',
    '/v1/orders?limit=true',
    '/v1/orders?limit=1e1',
    '/v1/orders?limit=0x10',
    '/v1/orders?limit=',
    '/v1/orders?limit=%2010',
    '/v1/orders/ord_x?wait=1.5',
    '/v1/orders/ord_x?wait=false',
  ])('query numbers are parsed only from their exact spelling: %s -> 400', async (path) => {
    const res = await call(api, 'GET', path, { key: t.key });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ type: `${PROBLEM}invalid-request` });
  });

  it('well-spelled query numbers still work', async () => {
    expect((await call(api, 'GET', '/v1/orders?limit=100', { key: t.key })).status).toBe(200);
    expect((await call(api, 'GET', '/v1/orders?limit=1', { key: t.key })).status).toBe(200);
  });
});

describe('what can never succeed is refused at the API', () => {
  let api: TestApi;
  let t: { tenantId: string; key: string };
  beforeAll(async () => {
    api = await startApi();
    t = await newTenant(api.pool, 'limit');
  });
  afterAll(async () => api?.close());

  it("the API's order-total limit is the payment provider's charge limit", () => {
    expect(MAX_ORDER_TOTAL).toBe((CreateChargeBody.properties.amount as { maximum?: number }).maximum);
  });

  it('a total above 99,999,999 minor units is 422 amount-too-large naming the limit; nothing written', async () => {
    const before = await tenantCounts(api.pool, t.tenantId);
    const res = await call(api, 'POST', '/v1/orders', {
      key: t.key,
      idem: uniq('big'),
      body: { ...validOrder(), items: [{ sku: 'S', quantity: 1, unitAmount: 100_000_000 }] },
    });
    expect(res.status).toBe(422);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(res.body).toMatchObject({
      type: `${PROBLEM}amount-too-large`,
      limit: 99_999_999,
      amount: 100_000_000,
    });
    expect((res.body as { detail: string }).detail).toMatch(/99999999/);
    expect(await tenantCounts(api.pool, t.tenantId)).toEqual(before);
  });

  it('a total of exactly the limit is accepted', async () => {
    const res = await call(api, 'POST', '/v1/orders', {
      key: t.key,
      idem: uniq('max'),
      body: { ...validOrder(), items: [{ sku: 'S', quantity: 1, unitAmount: 99_999_999 }] },
    });
    expect(res.status).toBe(202);
  });
});

describe('browser-facing pages', () => {
  let api: TestApi;
  beforeAll(async () => {
    api = await startApi();
  });
  afterAll(async () => api?.close());

  it('/docs and its assets carry security headers and a CSP that forbids framing', async () => {
    for (const path of ['/docs', '/docs/static/index.html', '/docs/static/swagger-initializer.js']) {
      const res = await fetch(`${api.url}${path}`);
      expect(res.status, path).toBe(200);
      const csp = res.headers.get('content-security-policy') ?? '';
      expect(csp, path).toMatch(/frame-ancestors 'none'/);
      expect(csp, path).toMatch(/object-src 'none'/);
      expect(csp, path).not.toMatch(/upgrade-insecure-requests|validator\.swagger\.io/);
      expect(res.headers.get('x-content-type-options')).toBe('nosniff');
      expect(res.headers.get('x-frame-options')).toBe('DENY');
      expect(res.headers.get('referrer-policy')).toBe('no-referrer');
      await res.arrayBuffer();
    }
  });

  it('JSON responses forbid everything a browser could do with them', async () => {
    const res = await fetch(`${api.url}/openapi.json`);
    expect(res.headers.get('content-security-policy')).toMatch(/default-src 'none'/);
    expect(res.headers.get('x-content-type-options')).toBe('nosniff');
    await res.arrayBuffer();
  });
});
