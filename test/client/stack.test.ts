/**
 * The typed client against the real stack (API + outbox relay + worker +
 * sandbox provider, real Postgres and Temporal), with a proxy in front of
 * the API that loses responses and restarts the API mid-request, and
 * provider faults underneath. Every intent ends as exactly one order, one
 * charge and one receipt.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { createOnceflowClient, type AttemptInfo, type CreateOrderBody } from '@onceflow/client';
import { startOrderStack, type OrderStack } from '../support/stack.ts';
import { newTenant, startApi, tenantCounts, type TestApi } from '../api/support.ts';
import { deferred } from '../support/wait.ts';

/** What the proxy does with one POST /v1/orders, decided as it arrives. */
type Mode = 'forward' | 'lose-response' | 'restart-api-then-lose-response';

let stack: OrderStack;
let api: TestApi;
let proxy: http.Server;
let proxyUrl: string;
let restarting: Promise<void> | undefined;
const posts: { key: string; outcome: string }[] = [];
const modes: Mode[] = [];
const apiDownSeen = deferred();

async function startRelayingApi(): Promise<TestApi> {
  const started = await startApi({ env: { TEMPORAL_TASK_QUEUE: stack.taskQueue } });
  // As src/api/main.ts does: the relay's loop starts workflows the post-commit kick missed.
  started.relay.start();
  return started;
}

/** Forwards to the current API; may lose the answer after the API acted on the request. */
function startProxy(): Promise<void> {
  proxy = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      void (async () => {
        const isPost = req.method === 'POST';
        const mode: Mode = (isPost && modes.shift()) || 'forward';
        const headers: Record<string, string> = {};
        for (const [k, v] of Object.entries(req.headers)) {
          if (typeof v === 'string' && !['host', 'connection', 'content-length'].includes(k)) headers[k] = v;
        }
        let upstream: Response;
        try {
          upstream = await fetch(`${api.url}${req.url}`, {
            method: req.method,
            headers,
            ...(isPost ? { body: Buffer.concat(chunks) } : {}),
          });
        } catch {
          if (isPost) posts.push({ key: headers['idempotency-key']!, outcome: 'api down' });
          apiDownSeen.resolve();
          return req.socket.destroy();
        }
        const text = await upstream.text();
        if (isPost) posts.push({ key: headers['idempotency-key']!, outcome: `${upstream.status} ${mode}` });
        if (mode === 'restart-api-then-lose-response') {
          // The API committed the order; it goes away before anyone hears the answer.
          const old = api;
          restarting = (async () => {
            await old.close();
            // Stay down until a retry has met the closed port.
            await apiDownSeen.promise;
            api = await startRelayingApi();
          })();
          return req.socket.destroy();
        }
        if (mode === 'lose-response') return req.socket.destroy();
        const out: Record<string, string> = {};
        upstream.headers.forEach((v, k) => {
          if (!['content-length', 'transfer-encoding', 'connection', 'keep-alive'].includes(k)) out[k] = v;
        });
        res.writeHead(upstream.status, out).end(text);
      })();
    });
  });
  return new Promise((r) =>
    proxy.listen(0, '127.0.0.1', () => {
      proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
      r();
    }),
  );
}

beforeAll(async () => {
  stack = await startOrderStack();
  api = await startRelayingApi();
  await startProxy();
});
afterAll(async () => {
  proxy?.closeAllConnections();
  await new Promise((r) => proxy?.close(r));
  await restarting?.catch(() => undefined);
  await api?.close();
  await stack?.close();
});

const order = (n: number): CreateOrderBody => ({
  customer: { id: `cus_${n}`, email: `buyer${n}@example.com` },
  currency: 'usd',
  items: [{ sku: `SKU-${n}`, quantity: 1, unitAmount: 1000 + n }],
  paymentMethod: 'pm_card_visa',
});

it('one order, one charge and one receipt per intent through lost responses, an API restart and provider faults', async () => {
  const { tenantId, key } = await newTenant(api.pool, 'client');
  const attempts: AttemptInfo[] = [];
  const client = createOnceflowClient({
    baseUrl: proxyUrl,
    apiKey: key,
    retry: { baseDelayMs: 100, maxDelayMs: 1_000, maxAttempts: 30, maxElapsedMs: 60_000 },
    onAttempt: (a) => attempts.push(a),
  });
  // Each provider call fails before acting a few times: the workflow retries under its own keys.
  await stack.fault('charges.create', 'fail_before', 3);
  await stack.fault('messages.create', 'fail_before', 2);

  // 1. The API creates the order, the answer is lost: the retry gets the replay.
  modes.push('lose-response');
  const lost = await client.createOrder(order(1));
  expect(lost).toMatchObject({ replayed: true, attempts: 2 });

  // 2. The API creates the order and restarts before answering; retries meet a closed port,
  //    then the new process, which replays from Postgres.
  modes.push('restart-api-then-lose-response');
  const restarted = await client.createOrder(order(2));
  expect(restarted.replayed).toBe(true);
  expect(restarted.attempts).toBeGreaterThanOrEqual(2);

  // 3. Two concurrent calls for one intent (same caller-given key): one order, both see it.
  const both = await Promise.all([
    client.createOrder(order(3), { idempotencyKey: 'intent-3' }),
    client.createOrder(order(3), { idempotencyKey: 'intent-3' }),
  ]);
  expect(both[0].order.id).toBe(both[1].order.id);
  expect(both.filter((r) => r.replayed).length).toBeGreaterThanOrEqual(1);

  // 4. A plain call.
  const plain = await client.createOrder(order(4));
  expect(plain).toMatchObject({ replayed: false, attempts: 1 });

  // Every attempt of an intent carried that intent's key; intents never shared one.
  const intents = [lost, restarted, both[0], plain];
  const keys = intents.map((r) => r.idempotencyKey);
  expect(new Set(keys).size).toBe(4);
  for (const p of posts) expect(keys).toContain(p.key);
  const perKey = (k: string) => attempts.filter((a) => a.idempotencyKey === k).length;
  expect(perKey(lost.idempotencyKey)).toBe(2);
  expect(perKey(restarted.idempotencyKey)).toBe(restarted.attempts);
  expect(posts.filter((p) => p.key === restarted.idempotencyKey).map((p) => p.outcome)).toContain('api down');
  expect(restarted.attempts).toBeGreaterThanOrEqual(3);

  const ids = [...new Set(intents.map((r) => r.order.id))];
  expect(ids).toHaveLength(4);
  for (const id of ids) {
    const final = await client.waitForOrder(id, { timeoutMs: 90_000 });
    expect(final.status).toBe('completed');
    const charges = (await stack.charges(id)).filter((c) => c.status === 'succeeded');
    expect(charges).toHaveLength(1);
    expect(await stack.messages(id)).toHaveLength(1);
  }
  expect((await tenantCounts(api.pool, tenantId)).orders).toBe(4);
  // The faults were really hit: more provider calls than orders.
  expect((await stack.charges()).length).toBeGreaterThanOrEqual(4);
});

it('errors are typed problems: an unknown order is a 404 problem, not retried', async () => {
  const { key } = await newTenant(api.pool, 'client');
  const attempts: AttemptInfo[] = [];
  const client = createOnceflowClient({ baseUrl: proxyUrl, apiKey: key, onAttempt: (a) => attempts.push(a) });
  await expect(client.waitForOrder('ord_doesnotexist')).rejects.toMatchObject({
    name: 'ProblemError',
    status: 404,
    type: 'https://onceflow.dev/problems/not-found',
  });
  expect(attempts).toHaveLength(1);
});
