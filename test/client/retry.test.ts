/**
 * The client's retry policy against a tiny real HTTP server on 127.0.0.1 that
 * answers from a script: drop the connection after reading the request, 503,
 * 429 with Retry-After, 409, then 202. Waiting is recorded instead of slept,
 * so the delays the policy chose are asserted exactly, without timing.
 */
import { afterEach, describe, expect, it } from 'vitest';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  DEFAULT_RETRY,
  NetworkError,
  ProblemError,
  backoffDelayMs,
  createOnceflowClient,
  isRetryableStatus,
  parseRetryAfter,
  type CreateOrderBody,
} from '@onceflow/client';

type Action =
  'drop' | { status: number; headers?: Record<string, string>; body?: unknown; contentType?: string };

interface Seen {
  method: string;
  url: string;
  key: string | undefined;
  body: string;
}

const servers: http.Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
});

async function scriptedServer(script: Action[]): Promise<{ url: string; seen: Seen[] }> {
  const seen: Seen[] = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      const key = req.headers['idempotency-key'];
      seen.push({ method: req.method!, url: req.url!, key: typeof key === 'string' ? key : undefined, body });
      const action = script[Math.min(seen.length - 1, script.length - 1)]!;
      // The request arrived in full and "ran"; its response is lost on the way back.
      if (action === 'drop') return req.socket.destroy();
      res.writeHead(action.status, {
        'content-type': action.contentType ?? 'application/json',
        ...action.headers,
      });
      res.end(action.body === undefined ? '' : JSON.stringify(action.body));
    });
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

const body: CreateOrderBody = {
  customer: { id: 'cus_1', email: 'a@example.com' },
  currency: 'usd',
  items: [{ sku: 'SKU-1', quantity: 1, unitAmount: 1000 }],
  paymentMethod: 'pm_card_visa',
};
const created = {
  id: 'ord_1',
  object: 'order',
  status: 'accepted',
  amount: 1000,
  currency: 'usd',
  workflowId: 'order/acme/ord_1',
  customer: body.customer,
  items: body.items,
  paymentMethod: 'pm_card_visa',
  createdAt: '2026-01-01T00:00:00.000Z',
};
const problem = (status: number, slug: string, title: string, detail?: string) => ({
  status,
  contentType: 'application/problem+json',
  body: { type: `https://onceflow.dev/problems/${slug}`, title, status, ...(detail ? { detail } : {}) },
});

function client(url: string, delays: number[], retry = {}) {
  return createOnceflowClient({
    baseUrl: url,
    apiKey: 'sk_test_x',
    retry: { maxElapsedMs: 10 * 60_000, ...retry },
    sleep: async (ms) => {
      delays.push(ms);
    },
    random: () => 0.5,
  });
}

describe('createOrder retries', () => {
  it('resends the same Idempotency-Key through a dropped response, 503, 429, 409, until the 202 replay', async () => {
    const retryAt = new Date(Date.now() + 30_000).toUTCString();
    const { url, seen } = await scriptedServer([
      'drop',
      problem(503, 'unavailable', 'A dependency is unavailable'),
      { ...problem(429, 'rate-limited', 'Too many requests'), headers: { 'retry-after': '2' } },
      {
        ...problem(409, 'idempotency-key-in-progress', 'Still processing'),
        headers: { 'retry-after': retryAt },
      },
      {
        status: 202,
        body: created,
        headers: { 'idempotent-replayed': 'true', location: '/v1/orders/ord_1' },
      },
    ]);
    const delays: number[] = [];
    const result = await client(url, delays).createOrder(body);

    expect(seen).toHaveLength(5);
    const key = seen[0]!.key!;
    expect(key).toMatch(/^[0-9a-f-]{36}$/);
    expect(seen.map((s) => s.key)).toEqual([key, key, key, key, key]);
    expect(new Set(seen.map((s) => s.body)).size).toBe(1);
    expect(result).toMatchObject({
      order: { id: 'ord_1' },
      replayed: true,
      idempotencyKey: key,
      attempts: 5,
    });

    // Full jitter with random()=0.5: half of 200, 400 ms; then never shorter than Retry-After.
    expect(delays[0]).toBe(100);
    expect(delays[1]).toBe(200);
    expect(delays[2]).toBe(2_000);
    // An HTTP date 30 s ahead (second resolution; sleeping is recorded, not done): a generous lower
    // bound keeps a loaded machine's latency out of the assertion, and it is far above any backoff.
    expect(delays[3]).toBeGreaterThanOrEqual(20_000);
    expect(delays[3]).toBeLessThanOrEqual(30_000);
    expect(delays).toHaveLength(4);
  });

  it('uses the caller-given key on every attempt, and a new key for each new intent', async () => {
    const { url, seen } = await scriptedServer([
      'drop',
      { status: 202, body: created },
      { status: 202, body: created },
      { status: 202, body: created },
    ]);
    const c = client(url, []);
    await c.createOrder(body, { idempotencyKey: 'order-42' });
    expect(seen.map((s) => s.key)).toEqual(['order-42', 'order-42']);
    const a = await c.createOrder(body);
    const b = await c.createOrder(body);
    expect(a.idempotencyKey).not.toBe(b.idempotencyKey);
    expect(seen.slice(2).map((s) => s.key)).toEqual([a.idempotencyKey, b.idempotencyKey]);
  });

  it('never retries a 422 and throws it as a typed problem', async () => {
    const { url, seen } = await scriptedServer([
      problem(422, 'idempotency-key-reused', 'Key reused', 'Use a new key for new work.'),
      { status: 202, body: created },
    ]);
    const delays: number[] = [];
    const err = await client(url, delays)
      .createOrder(body, { idempotencyKey: 'k-422' })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ProblemError);
    expect(err).toMatchObject({
      type: 'https://onceflow.dev/problems/idempotency-key-reused',
      title: 'Key reused',
      status: 422,
      detail: 'Use a new key for new work.',
      attempts: 1,
      idempotencyKey: 'k-422',
    });
    expect(seen).toHaveLength(1);
    expect(delays).toEqual([]);
  });

  it.each([400, 401, 403, 404, 413, 415])('never retries a %i', async (status) => {
    const { url, seen } = await scriptedServer([problem(status, 'x', 'No'), { status: 202, body: created }]);
    await expect(client(url, []).createOrder(body)).rejects.toMatchObject({ status, attempts: 1 });
    expect(seen).toHaveLength(1);
  });

  it('gives up after maxAttempts with the last answer, still naming the key to retry with later', async () => {
    const { url, seen } = await scriptedServer([problem(503, 'unavailable', 'Down')]);
    const delays: number[] = [];
    const err = await client(url, delays, { maxAttempts: 4 })
      .createOrder(body)
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ProblemError);
    expect(err).toMatchObject({ status: 503, attempts: 4, idempotencyKey: seen[0]!.key });
    expect(seen).toHaveLength(4);
    expect(delays).toHaveLength(3);
  });

  it('gives up after maxAttempts of dropped connections with a NetworkError', async () => {
    const { url, seen } = await scriptedServer(['drop']);
    const err = await client(url, [], { maxAttempts: 3 })
      .createOrder(body)
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NetworkError);
    expect(err).toMatchObject({ attempts: 3 });
    expect(new Set(seen.map((s) => s.key)).size).toBe(1);
    expect(seen).toHaveLength(3);
  });

  it('stops when Retry-After is beyond what the caller allows, or beyond the time budget', async () => {
    const slow = await scriptedServer([
      { ...problem(429, 'rate-limited', 'Later'), headers: { 'retry-after': '3600' } },
    ]);
    await expect(client(slow.url, []).createOrder(body)).rejects.toMatchObject({ status: 429, attempts: 1 });
    expect(slow.seen).toHaveLength(1);

    const budget = await scriptedServer([
      { ...problem(503, 'unavailable', 'Down'), headers: { 'retry-after': '5' } },
    ]);
    await expect(client(budget.url, [], { maxElapsedMs: 8_000 }).createOrder(body)).rejects.toMatchObject({
      status: 503,
      attempts: 2,
    });
  });

  it('turns a non-problem error body into an about:blank problem with the HTTP status', async () => {
    const { url } = await scriptedServer([{ status: 400, contentType: 'text/html', body: '<h1>bad</h1>' }]);
    await expect(client(url, []).createOrder(body)).rejects.toMatchObject({
      type: 'about:blank',
      status: 400,
    });
  });
});

describe('policy functions', () => {
  it('classifies statuses', () => {
    for (const s of [408, 409, 425, 429, 500, 502, 503, 504]) expect(isRetryableStatus(s)).toBe(true);
    for (const s of [400, 401, 403, 404, 405, 413, 415, 422]) expect(isRetryableStatus(s)).toBe(false);
  });

  it('parses Retry-After as seconds or an HTTP date', () => {
    const now = Date.parse('2026-01-01T00:00:00Z');
    expect(parseRetryAfter('3', now)).toBe(3_000);
    expect(parseRetryAfter(' 0 ', now)).toBe(0);
    expect(parseRetryAfter('Thu, 01 Jan 2026 00:00:07 GMT', now)).toBe(7_000);
    expect(parseRetryAfter('Wed, 31 Dec 2025 23:59:00 GMT', now)).toBe(0);
    expect(parseRetryAfter('soon', now)).toBeUndefined();
    expect(parseRetryAfter('-1', now)).toBeUndefined();
    expect(parseRetryAfter(null, now)).toBeUndefined();
  });

  it('backs off exponentially with full jitter, capped, and never below Retry-After', () => {
    const o = { baseDelayMs: 100, maxDelayMs: 1_000 };
    expect([1, 2, 3, 4, 5, 6].map((r) => backoffDelayMs(r, o, undefined, () => 0.999))).toEqual([
      99, 199, 399, 799, 999, 999,
    ]);
    expect(backoffDelayMs(3, o, undefined, () => 0)).toBe(0);
    expect(backoffDelayMs(1, o, 5_000, () => 0.999)).toBe(5_000);
    expect(backoffDelayMs(6, o, 10, () => 0.5)).toBe(500);
    expect(DEFAULT_RETRY.maxAttempts).toBeGreaterThan(1);
  });
});
