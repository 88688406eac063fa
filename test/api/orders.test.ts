/**
 * The POST /v1/orders contract (DOMAIN.md "HTTP contract"), GET and list,
 * against a real server, real Postgres and the real Temporal dev server.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WorkflowNotFoundError } from '@temporalio/client';
import { normalizeCreateOrder } from '../../src/api/routes/orders.ts';
import { OPERATION_TYPES, orderWorkflowId } from '../../src/orders/model.ts';
import { uniq } from '../support/env.ts';
import { deferred } from '../support/wait.ts';
import {
  PROBLEM,
  call,
  longPollWaiting,
  newTenant,
  rawRequest,
  startApi,
  tenantCounts,
  validOrder,
  type TestApi,
} from './support.ts';

type OrderBody = { id: string; status: string; amount: number; currency: string; workflowId: string };

describe('POST /v1/orders: the Idempotency-Key contract', () => {
  let api: TestApi;
  let acme: { tenantId: string; key: string };
  let globex: { tenantId: string; key: string };

  beforeAll(async () => {
    api = await startApi({ localWaitMs: 300 });
    acme = await newTenant(api.pool, 'acme');
    globex = await newTenant(api.pool, 'globex');
  });
  afterAll(async () => api?.close());

  it('202 with Location and the order; the order row, outbox row and workflow exist', async () => {
    const idem = uniq('idem');
    const res = await call(api, 'POST', '/v1/orders', { key: acme.key, idem, body: validOrder() });
    expect(res.status).toBe(202);
    const body = res.body as OrderBody;
    expect(body).toMatchObject({ status: 'accepted', amount: 3000, currency: 'usd', object: 'order' });
    expect(body.id).toMatch(/^ord_[0-9a-f]{24}$/);
    expect(body.workflowId).toBe(orderWorkflowId(acme.tenantId, body.id));
    expect(res.headers.get('location')).toBe(`/v1/orders/${body.id}`);
    expect(res.headers.get('idempotent-replayed')).toBeNull();
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);

    const order = await api.pool.query(
      'select status, amount, workflow_id from orders where tenant_id = $1 and id = $2',
      [acme.tenantId, body.id],
    );
    expect(order.rows).toEqual([{ status: 'accepted', amount: '3000', workflow_id: body.workflowId }]);
    const rec = await api.ledger.get({
      tenantId: acme.tenantId,
      operationType: OPERATION_TYPES.createOrder,
      key: idem,
    });
    expect(rec?.state).toBe('succeeded');

    // Started right after commit (relay on): the workflow exists with the deterministic ID.
    await expect
      .poll(
        async () =>
          (
            await api.pool.query('select started_at from workflow_outbox where workflow_id = $1', [
              body.workflowId,
            ])
          ).rows[0]?.started_at,
        { timeout: 10_000 },
      )
      .toBeTruthy();
    const desc = await api.client.workflow.getHandle(body.workflowId).describe();
    expect(desc.type).toBe('orderWorkflow');
    expect(desc.taskQueue).toBe(api.config.temporal.taskQueue);
  });

  it('same key + same body (any key order, any whitespace) replays the original with Idempotent-Replayed: true', async () => {
    const idem = uniq('idem');
    const first = await call(api, 'POST', '/v1/orders', { key: acme.key, idem, body: validOrder() });
    expect(first.status).toBe(202);
    const reordered =
      '{ "paymentMethod":"pm_card_visa",\n "items":[{"unitAmount":1500,"quantity":2,"sku":"SKU-1"}],' +
      '  "currency":"USD", "customer":{"email":"a@example.com","id":"cus_1"} }';
    const again = await call(api, 'POST', '/v1/orders', { key: acme.key, idem, raw: reordered });
    expect(again.status).toBe(202);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.headers.get('location')).toBe(first.headers.get('location'));
    expect(again.text).toBe(first.text);
    const { rows } = await api.pool.query(
      'select count(*)::int as n from orders where tenant_id = $1 and id = $2',
      [acme.tenantId, (first.body as OrderBody).id],
    );
    expect(rows[0].n).toBe(1);
  });

  it('same key + different body gets 422 problem+json and creates nothing', async () => {
    const idem = uniq('idem');
    expect((await call(api, 'POST', '/v1/orders', { key: acme.key, idem, body: validOrder() })).status).toBe(
      202,
    );
    const before = await tenantCounts(api.pool, acme.tenantId);
    const other = { ...validOrder(), items: [{ sku: 'SKU-1', quantity: 3, unitAmount: 1500 }] };
    const res = await call(api, 'POST', '/v1/orders', { key: acme.key, idem, body: other });
    expect(res.status).toBe(422);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(res.body).toMatchObject({ type: `${PROBLEM}idempotency-key-reused`, status: 422 });
    expect(await tenantCounts(api.pool, acme.tenantId)).toEqual(before);
  });

  it('same key while the first is still processing gets 409 with Retry-After; nothing is stored for it', async () => {
    const idem = uniq('idem');
    const order = validOrder();
    const held = deferred();
    const entered = deferred();
    // Hold a first attempt open inside its ledger transaction (the same scope and fingerprint the API uses).
    const first = api.ledger.runLocal(
      { tenantId: acme.tenantId, operationType: OPERATION_TYPES.createOrder, key: idem },
      { schemaVersion: 1, value: { method: 'POST', path: '/v1/orders', body: normalizeCreateOrder(order) } },
      async () => {
        entered.resolve();
        await held.promise;
        throw new Error('first attempt crashed before commit');
      },
    );
    const firstOutcome = first.catch((e: unknown) => e);
    await entered.promise;
    const res = await call(api, 'POST', '/v1/orders', { key: acme.key, idem, body: order });
    expect(res.status).toBe(409);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(res.body).toMatchObject({ type: `${PROBLEM}idempotency-key-in-progress`, status: 409 });
    expect(Number(res.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    held.resolve();
    expect(await firstOutcome).toBeInstanceOf(Error);
    // The first attempt rolled back; a retry with the same key now runs normally.
    const retry = await call(api, 'POST', '/v1/orders', { key: acme.key, idem, body: order });
    expect(retry.status).toBe(202);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
  });

  it('the structured-field form "abc" (IETF draft, RFC 8941 sf-string) is the same key as abc', async () => {
    const bare = uniq('idem');
    const first = await call(api, 'POST', '/v1/orders', {
      key: acme.key,
      idem: `"${bare}"`,
      body: validOrder(),
    });
    expect(first.status).toBe(202);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    const retry = await call(api, 'POST', '/v1/orders', { key: acme.key, idem: bare, body: validOrder() });
    expect(retry.status).toBe(202);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect((retry.body as OrderBody).id).toBe((first.body as OrderBody).id);
    // Escapes are decoded: "a\"b\\c" names the key a"b\c.
    const escaped = await call(api, 'POST', '/v1/orders', {
      key: acme.key,
      idem: `"${bare}\\"x\\\\"`,
      body: validOrder(),
    });
    expect(escaped.status).toBe(202);
    const sameEscaped = await call(api, 'POST', '/v1/orders', {
      key: acme.key,
      idem: `${bare}"x\\`,
      body: validOrder(),
    });
    expect(sameEscaped.headers.get('idempotent-replayed')).toBe('true');
    expect((sameEscaped.body as OrderBody).id).toBe((escaped.body as OrderBody).id);
  });

  it('a malformed structured-field key is a 400 invalid-idempotency-key that says why; nothing stored', async () => {
    const t = await newTenant(api.pool, 'sf');
    for (const [idem, why] of [
      ['"abc', /no closing quote/],
      ['"a\\bc"', /bad escape/],
      ['"abc";v=1', /closing quote/],
      ['""', /must not be empty/],
      ['"a b"', /visible ASCII/],
    ] as const) {
      const res = await call(api, 'POST', '/v1/orders', { key: t.key, idem, body: validOrder() });
      expect(res.status, idem).toBe(400);
      expect(res.body, idem).toMatchObject({
        type: `${PROBLEM}invalid-idempotency-key`,
        detail: expect.stringMatching(why),
      });
    }
    expect(await tenantCounts(api.pool, t.tenantId)).toEqual({ orders: 0, operations: 0, outbox: 0 });
  });

  it('401 for a missing, malformed or unknown key; never stored', async () => {
    const before = await tenantCounts(api.pool, acme.tenantId);
    const idem = uniq('idem');
    for (const authorization of [undefined, 'Basic abc', 'Bearer ', 'Bearer sk_test_nope', `${acme.key}`]) {
      const res = await call(api, 'POST', '/v1/orders', {
        idem,
        body: validOrder(),
        headers: authorization ? { authorization } : {},
      });
      expect(res.status).toBe(401);
      expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(res.body).toMatchObject({ type: `${PROBLEM}unauthorized`, status: 401 });
      expect(res.headers.get('www-authenticate')).toBe('Bearer');
    }
    expect(await tenantCounts(api.pool, acme.tenantId)).toEqual(before);
    const ok = await call(api, 'POST', '/v1/orders', { key: acme.key, idem, body: validOrder() });
    expect(ok.status).toBe(202);
    expect(ok.headers.get('idempotent-replayed')).toBeNull();
  });

  it('400 for a missing, empty, repeated, too long or non-visible-ASCII Idempotency-Key; nothing written', async () => {
    const before = await tenantCounts(api.pool, acme.tenantId);
    const body = JSON.stringify(validOrder());
    const expect400 = (res: { status: number; body: unknown; headers: Headers }) => {
      expect(res.status).toBe(400);
      expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(res.body).toMatchObject({ type: `${PROBLEM}invalid-idempotency-key`, status: 400 });
    };
    expect400(await call(api, 'POST', '/v1/orders', { key: acme.key, raw: body }));
    expect400(await call(api, 'POST', '/v1/orders', { key: acme.key, idem: '', raw: body }));
    expect400(await call(api, 'POST', '/v1/orders', { key: acme.key, idem: 'x'.repeat(256), raw: body }));
    expect400(await call(api, 'POST', '/v1/orders', { key: acme.key, idem: 'has space', raw: body }));
    expect400(await call(api, 'POST', '/v1/orders', { key: acme.key, idem: 'tab\there', raw: body }));
    // 255 is the maximum and is fine.
    const max = await call(api, 'POST', '/v1/orders', {
      key: acme.key,
      idem: `k${'x'.repeat(254)}${Date.now()}`.slice(0, 255),
      raw: body,
    });
    expect(max.status).toBe(202);

    const head = (idemLines: string) =>
      `POST /v1/orders HTTP/1.1\r\nAuthorization: Bearer ${acme.key}\r\nContent-Type: application/json\r\n${idemLines}`;
    const repeated = await rawRequest(api, head('Idempotency-Key: a1\r\nIdempotency-Key: a1\r\n'), body);
    expect(repeated.status).toBe(400);
    expect(JSON.parse(repeated.body)).toMatchObject({ type: `${PROBLEM}invalid-idempotency-key` });
    const nonAscii = await rawRequest(api, head('Idempotency-Key: caf\xe9-1\r\n'), body);
    expect(nonAscii.status).toBe(400);
    expect(JSON.parse(nonAscii.body)).toMatchObject({ type: `${PROBLEM}invalid-idempotency-key` });
    const del = await rawRequest(api, head('Idempotency-Key: a\x7fb\r\n'), body);
    expect(del.status).toBe(400);
    // NUL and other control characters are refused by the HTTP parser itself: still a 400 problem.
    for (const ctl of ['\x00', '\x01', '\x1b']) {
      const res = await rawRequest(api, head(`Idempotency-Key: a${ctl}b\r\n`), body);
      expect(res.status).toBe(400);
      expect(res.headers).toMatch(/application\/problem\+json/i);
    }
    const after = await tenantCounts(api.pool, acme.tenantId);
    expect(after).toEqual({
      orders: before.orders + 1,
      operations: before.operations + 1,
      outbox: before.outbox + 1,
    });
  });

  it('schema-invalid 400 is not stored: the same key with a valid body then succeeds', async () => {
    const idem = uniq('idem');
    const bad = await call(api, 'POST', '/v1/orders', {
      key: acme.key,
      idem,
      body: { ...validOrder(), items: [{ sku: 'SKU-1', quantity: '2', unitAmount: 1500 }] },
    });
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ type: `${PROBLEM}invalid-request`, status: 400 });
    expect(JSON.stringify(bad.body)).not.toMatch(/stack|select|insert/i);
    const good = await call(api, 'POST', '/v1/orders', { key: acme.key, idem, body: validOrder() });
    expect(good.status).toBe(202);
    expect(good.headers.get('idempotent-replayed')).toBeNull();
  });

  it('a 5xx is not stored: after the fault is gone, a retry with the same key creates the order', async () => {
    const t = await newTenant(api.pool, 'fault');
    // A real failure inside the create transaction, for this tenant only.
    const fn = `fail_outbox_${t.tenantId.replace(/[^a-z0-9]/g, '_')}`;
    await api.pool.query(`create function ${fn}() returns trigger language plpgsql as $$
      begin if new.tenant_id = '${t.tenantId}' then raise exception 'injected fault: secret internal detail'; end if; return new; end $$`);
    await api.pool.query(
      `create trigger ${fn} before insert on workflow_outbox for each row execute function ${fn}()`,
    );
    const idem = uniq('idem');
    try {
      const res = await call(api, 'POST', '/v1/orders', { key: t.key, idem, body: validOrder() });
      expect(res.status).toBe(500);
      expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(res.body).toMatchObject({ type: `${PROBLEM}internal`, status: 500 });
      expect(res.text).not.toMatch(/injected|secret|workflow_outbox|trigger|at .*\.ts/);
      expect(await tenantCounts(api.pool, t.tenantId)).toEqual({ orders: 0, operations: 0, outbox: 0 });
    } finally {
      await api.pool.query(`drop trigger ${fn} on workflow_outbox`);
      await api.pool.query(`drop function ${fn}()`);
    }
    const retry = await call(api, 'POST', '/v1/orders', { key: t.key, idem, body: validOrder() });
    expect(retry.status).toBe(202);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect(await tenantCounts(api.pool, t.tenantId)).toEqual({ orders: 1, operations: 1, outbox: 1 });
  });

  it('the same key under another tenant is a separate order and never replays the first tenant’s', async () => {
    const idem = uniq('shared');
    const a = await call(api, 'POST', '/v1/orders', { key: acme.key, idem, body: validOrder() });
    const b = await call(api, 'POST', '/v1/orders', { key: globex.key, idem, body: validOrder() });
    expect(a.status).toBe(202);
    expect(b.status).toBe(202);
    expect(b.headers.get('idempotent-replayed')).toBeNull();
    const ab = a.body as OrderBody;
    const bb = b.body as OrderBody;
    expect(bb.id).not.toBe(ab.id);
    expect(bb.workflowId).toBe(orderWorkflowId(globex.tenantId, bb.id));
    // A different body under the same key is still fine for the other tenant (no 422 across tenants).
    const c = await call(api, 'POST', '/v1/orders', {
      key: globex.key,
      idem: `${idem}-2`,
      body: { ...validOrder(), currency: 'eur' },
    });
    expect(c.status).toBe(202);
    // Each tenant's replay returns its own order.
    const a2 = await call(api, 'POST', '/v1/orders', { key: acme.key, idem, body: validOrder() });
    expect((a2.body as OrderBody).id).toBe(ab.id);
    const b2 = await call(api, 'POST', '/v1/orders', { key: globex.key, idem, body: validOrder() });
    expect((b2.body as OrderBody).id).toBe(bb.id);
    expect(b2.headers.get('idempotent-replayed')).toBe('true');
  });

  it('GET /v1/orders/{id}: status, steps from the ledger, 404 for another tenant, 400 for a bad wait', async () => {
    const created = await call(api, 'POST', '/v1/orders', {
      key: acme.key,
      idem: uniq('idem'),
      body: validOrder(),
    });
    const { id, workflowId } = created.body as OrderBody;
    // A step record as the workflow's charge activity would leave it mid-flight.
    await api.ledger.claim(
      { tenantId: acme.tenantId, operationType: OPERATION_TYPES.charge, key: `${workflowId}/charge` },
      { schemaVersion: 1, value: { amount: 3000 } },
    );
    const res = await call(api, 'GET', `/v1/orders/${id}`, { key: acme.key });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id, status: 'accepted', amount: 3000, currency: 'usd', workflowId });
    const steps = (res.body as { steps: unknown[] }).steps;
    expect(steps).toEqual([
      expect.objectContaining({
        name: 'charge',
        operationType: OPERATION_TYPES.charge,
        operationKey: `${workflowId}/charge`,
        state: 'in_progress',
        attempts: 1,
        providerRef: null,
        completedAt: null,
      }),
    ]);
    const other = await call(api, 'GET', `/v1/orders/${id}`, { key: globex.key });
    expect(other.status).toBe(404);
    expect(other.body).toMatchObject({ type: `${PROBLEM}not-found` });
    expect(other.text).not.toContain(workflowId);
    expect((await call(api, 'GET', `/v1/orders/ord_nope`, { key: acme.key })).status).toBe(404);
    expect((await call(api, 'GET', `/v1/orders/${id}?wait=31`, { key: acme.key })).status).toBe(400);
    expect(
      (await call(api, 'GET', `/v1/orders/${encodeURIComponent('a\u0000b')}`, { key: acme.key })).status,
    ).toBe(400);
    expect((await call(api, 'GET', `/v1/orders/${id}`)).status).toBe(401);
  });

  it('GET ?wait=N long-polls until a terminal status, or N seconds', async () => {
    const created = await call(api, 'POST', '/v1/orders', {
      key: acme.key,
      idem: uniq('idem'),
      body: validOrder(),
    });
    const { id } = created.body as OrderBody;
    let t0 = Date.now();
    const timedOut = await call(api, 'GET', `/v1/orders/${id}?wait=1`, { key: acme.key });
    expect(timedOut.status).toBe(200);
    expect((timedOut.body as OrderBody).status).toBe('accepted');
    expect(Date.now() - t0).toBeGreaterThanOrEqual(900);

    t0 = Date.now();
    const poll = longPollWaiting(id);
    try {
      const waiting = call(api, 'GET', `/v1/orders/${id}?wait=20`, { key: acme.key });
      // The request is inside its long poll (it has read `accepted` and waits), so the change
      // below wakes it rather than precedes it. The wake is the status trigger's NOTIFY on a
      // terminal change (src/api/order-waits.ts); a waiter re-reads on a timer too, every 5 s
      // while listening, and backing off from 250 ms to 4 s while LISTEN is down.
      const first = await Promise.race([
        poll.waiting.then(() => 'waiting' as const),
        waiting.then((res) => ({ answeredWithoutWaiting: res.body })),
      ]);
      expect(first).toBe('waiting');
      // What the workflow's status activity does, compressed: the row reaches a terminal status.
      await api.pool.query(
        `update orders set status = 'completed', status_seq = status_seq + 1 where tenant_id = $1 and id = $2`,
        [acme.tenantId, id],
      );
      const done = await waiting;
      expect((done.body as OrderBody).status).toBe('completed');
    } finally {
      poll.restore();
    }
    // It answered when the order finished, not when its 20 s window ran out.
    expect(Date.now() - t0).toBeLessThan(20_000);
  });

  it('GET /v1/orders lists the tenant’s orders with a status filter and cursor pagination', async () => {
    const t = await newTenant(api.pool, 'list');
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const res = await call(api, 'POST', '/v1/orders', {
        key: t.key,
        idem: `list-${i}`,
        body: validOrder(),
      });
      ids.push((res.body as OrderBody).id);
    }
    await api.pool.query(`update orders set status = 'rejected' where tenant_id = $1 and id = $2`, [
      t.tenantId,
      ids[1],
    ]);
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const q: string = cursor ? `?limit=2&cursor=${cursor}` : '?limit=2';
      const page = await call(api, 'GET', `/v1/orders${q}`, { key: t.key });
      expect(page.status).toBe(200);
      const b = page.body as { data: OrderBody[]; hasMore: boolean; nextCursor: string | null };
      expect(b.data.length).toBeLessThanOrEqual(2);
      seen.push(...b.data.map((o) => o.id));
      cursor = b.nextCursor;
      expect(b.hasMore).toBe(cursor !== null);
      pages++;
    } while (cursor && pages < 10);
    expect(pages).toBe(3);
    expect(seen).toEqual([...ids].reverse()); // newest first, each exactly once
    const rejected = await call(api, 'GET', '/v1/orders?status=rejected', { key: t.key });
    expect((rejected.body as { data: OrderBody[] }).data.map((o) => o.id)).toEqual([ids[1]]);
    expect((await call(api, 'GET', '/v1/orders?status=bogus', { key: t.key })).status).toBe(400);
    expect((await call(api, 'GET', '/v1/orders?cursor=Zm9v', { key: t.key })).status).toBe(400);
    expect((await call(api, 'GET', '/v1/orders?limit=0', { key: t.key })).status).toBe(400);
    // Another tenant sees none of them.
    const other = await call(api, 'GET', '/v1/orders?limit=100', { key: globex.key });
    const otherIds = (other.body as { data: OrderBody[] }).data.map((o) => o.id);
    expect(otherIds.filter((id) => ids.includes(id))).toEqual([]);
  });

  it('the seeded demo keys map to the demo tenants', async () => {
    const res = await call(api, 'GET', '/v1/orders?limit=1', { key: 'sk_test_acme_local' });
    expect(res.status).toBe(200);
    const globexRes = await call(api, 'GET', '/v1/orders?limit=1', { key: 'sk_test_globex_local' });
    expect(globexRes.status).toBe(200);
    const { rows } = await api.pool.query(
      'select tenant_id from api_keys where key_hash = encode(sha256($1::bytea), $2)',
      ['sk_test_acme_local', 'hex'],
    );
    expect(rows).toEqual([{ tenant_id: 'acme' }]);
  });

  it('serves OpenAPI, docs, health and readiness; unknown routes are 404 problems', async () => {
    const spec = await call(api, 'GET', '/openapi.json');
    expect(spec.status).toBe(200);
    const paths = (spec.body as { paths: Record<string, unknown> }).paths;
    expect(Object.keys(paths)).toEqual(
      expect.arrayContaining([
        '/v1/orders',
        '/v1/orders/{id}',
        '/v1/webhooks/payments',
        '/healthz',
        '/readyz',
      ]),
    );
    const docs = await fetch(`${api.url}/docs`);
    expect(docs.status).toBe(200);
    expect(await docs.text()).toMatch(/swagger/i);
    expect((await call(api, 'GET', '/healthz')).status).toBe(200);
    const ready = await call(api, 'GET', '/readyz');
    expect(ready.status).toBe(200);
    expect(ready.body).toEqual({ status: 'ok', checks: { postgres: 'ok', temporal: 'ok' } });
    const missing = await call(api, 'GET', '/nope');
    expect(missing.status).toBe(404);
    expect(missing.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  });

  it('a workflow that does not exist yet is reported as not found by Temporal (sanity for the outbox tests)', async () => {
    await expect(
      api.client.workflow.getHandle(`order/${acme.tenantId}/ord_none`).describe(),
    ).rejects.toBeInstanceOf(WorkflowNotFoundError);
  });
});

describe('rate limiting', () => {
  let api: TestApi;
  beforeAll(async () => {
    api = await startApi({ env: { API_RATE_LIMIT_MAX: '3', API_RATE_LIMIT_WINDOW_MS: '60000' } });
  });
  afterAll(async () => api?.close());

  it('429 problem+json per tenant, with Retry-After; never stored', async () => {
    const a = await newTenant(api.pool, 'rl');
    const b = await newTenant(api.pool, 'rl');
    for (let i = 0; i < 3; i++) {
      expect((await call(api, 'GET', '/v1/orders', { key: a.key })).status).toBe(200);
    }
    const idem = uniq('idem');
    const limited = await call(api, 'POST', '/v1/orders', { key: a.key, idem, body: validOrder() });
    expect(limited.status).toBe(429);
    expect(limited.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(limited.body).toMatchObject({ type: `${PROBLEM}rate-limited`, status: 429 });
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(await tenantCounts(api.pool, a.tenantId)).toEqual({ orders: 0, operations: 0, outbox: 0 });
    // Another tenant has its own budget.
    expect((await call(api, 'POST', '/v1/orders', { key: b.key, idem, body: validOrder() })).status).toBe(
      202,
    );
    // Unauthenticated requests never spend a tenant's budget (401 comes first).
    expect((await call(api, 'GET', '/v1/orders', { key: 'sk_test_wrong' })).status).toBe(401);
  });
});

describe('request metrics hook', () => {
  it('reports each response by route pattern, status and duration', async () => {
    const seen: { route: string; status: number; durationMs: number }[] = [];
    const api = await startApi({
      onRequestMetrics: (route, status, durationMs) => seen.push({ route, status, durationMs }),
    });
    try {
      const t = await newTenant(api.pool, 'm');
      const created = await call(api, 'POST', '/v1/orders', {
        key: t.key,
        idem: uniq('idem'),
        body: validOrder(),
      });
      await call(api, 'GET', `/v1/orders/${(created.body as OrderBody).id}`, { key: t.key });
      await call(api, 'GET', '/v1/orders/ord_x');
      expect(seen).toEqual([
        { route: '/v1/orders', status: 202, durationMs: expect.any(Number) },
        { route: '/v1/orders/:id', status: 200, durationMs: expect.any(Number) },
        { route: '/v1/orders/:id', status: 401, durationMs: expect.any(Number) },
      ]);
    } finally {
      await api.close();
    }
  });
});
