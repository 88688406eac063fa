/**
 * The natural key of orders (issue 27): `merchantReference`, unique per
 * tenant through a unique index, decided inside the create transaction.
 * Against a real server, real Postgres and the real Temporal dev server.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OPERATION_TYPES } from '../../src/orders/model.ts';
import { uniq } from '../support/env.ts';
import { PROBLEM, call, newTenant, startApi, tenantCounts, validOrder, type TestApi } from './support.ts';

type OrderBody = { id: string; merchantReference: string | null; refundedAmount: number };

describe('merchantReference: the natural key of orders', () => {
  let api: TestApi;
  let acme: { tenantId: string; key: string };
  let globex: { tenantId: string; key: string };

  beforeAll(async () => {
    api = await startApi({ localWaitMs: 300 });
    acme = await newTenant(api.pool, 'acme');
    globex = await newTenant(api.pool, 'globex');
  });
  afterAll(async () => api?.close());

  const create = (tenant: { key: string }, idem: string, merchantReference?: string, amount = 1500) =>
    call(api, 'POST', '/v1/orders', {
      key: tenant.key,
      idem,
      body: {
        ...validOrder(),
        items: [{ sku: 'SKU-1', quantity: 1, unitAmount: amount }],
        ...(merchantReference !== undefined ? { merchantReference } : {}),
      },
    });

  it('is stored and shown by the create answer, GET and the list; absent means null', async () => {
    const ref = uniq('inv-2026/04#');
    const res = await create(acme, uniq('idem'), ref);
    expect(res.status).toBe(202);
    const body = res.body as OrderBody;
    expect(body).toMatchObject({ merchantReference: ref, refundedAmount: 0 });
    const got = await call(api, 'GET', `/v1/orders/${body.id}`, { key: acme.key });
    expect(got.body).toMatchObject({ id: body.id, merchantReference: ref, refundedAmount: 0 });
    const list = await call(api, 'GET', '/v1/orders?limit=1', { key: acme.key });
    expect((list.body as { data: OrderBody[] }).data[0]).toMatchObject({
      id: body.id,
      merchantReference: ref,
    });

    const none = await create(acme, uniq('idem'));
    expect(none.status).toBe(202);
    expect((none.body as OrderBody).merchantReference).toBeNull();
  });

  it('a second order with the reference under another key: 409 with the first order, nothing written', async () => {
    const ref = uniq('ref');
    const first = await create(acme, uniq('idem'), ref);
    expect(first.status).toBe(202);
    const firstId = (first.body as OrderBody).id;
    const before = await tenantCounts(api.pool, acme.tenantId);

    const secondKey = uniq('idem');
    // Another body too: the natural key answers whatever else the request says.
    const dup = await create(acme, secondKey, ref, 2500);
    expect(dup.status).toBe(409);
    expect(dup.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(dup.body).toMatchObject({
      type: `${PROBLEM}duplicate-merchant-reference`,
      status: 409,
      id: firstId,
      location: `/v1/orders/${firstId}`,
    });
    expect(dup.headers.get('location')).toBe(`/v1/orders/${firstId}`);
    expect(dup.headers.get('retry-after')).toBeNull();
    // Nothing written: no order, no outbox row, and no idempotency record under the second key.
    expect(await tenantCounts(api.pool, acme.tenantId)).toEqual(before);
    expect(
      await api.ledger.get({
        tenantId: acme.tenantId,
        operationType: OPERATION_TYPES.createOrder,
        key: secondKey,
      }),
    ).toBeNull();

    // Since nothing was stored under the second key, it still works for a different order.
    const other = await create(acme, secondKey, uniq('ref'), 2500);
    expect(other.status).toBe(202);
  });

  it('the same Idempotency-Key replays: not a 409', async () => {
    const ref = uniq('ref');
    const idem = uniq('idem');
    const first = await create(acme, idem, ref);
    const again = await create(acme, idem, ref);
    expect(again.status).toBe(202);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body).toEqual(first.body);
  });

  it('two tenants may use the same reference', async () => {
    const ref = uniq('shared');
    const a = await create(acme, uniq('idem'), ref);
    const b = await create(globex, uniq('idem'), ref);
    expect([a.status, b.status]).toEqual([202, 202]);
    expect((a.body as OrderBody).id).not.toBe((b.body as OrderBody).id);
  });

  it('racing requests with one reference under different keys: exactly one order', async () => {
    const ref = uniq('race');
    const before = await tenantCounts(api.pool, acme.tenantId);
    const results = await Promise.all(Array.from({ length: 12 }, () => create(acme, uniq('idem'), ref)));
    const created = results.filter((r) => r.status === 202);
    const refused = results.filter((r) => r.status === 409);
    expect(created).toHaveLength(1);
    expect(refused).toHaveLength(11);
    const winner = (created[0]!.body as OrderBody).id;
    for (const r of refused)
      expect(r.body).toMatchObject({ type: `${PROBLEM}duplicate-merchant-reference`, id: winner });
    const after = await tenantCounts(api.pool, acme.tenantId);
    expect(after.orders - before.orders).toBe(1);
    const { rows } = await api.pool.query(
      'select id from orders where tenant_id = $1 and merchant_reference = $2',
      [acme.tenantId, ref],
    );
    expect(rows).toEqual([{ id: winner }]);
  });

  it.each([
    ['empty', ''],
    ['a space', 'inv 1'],
    ['non-ASCII', 'inv-é'],
    ['101 characters', 'x'.repeat(101)],
    ['a number', 42],
  ])('%s is a 400, nothing written', async (_name, merchantReference) => {
    const before = await tenantCounts(api.pool, acme.tenantId);
    const res = await call(api, 'POST', '/v1/orders', {
      key: acme.key,
      idem: uniq('idem'),
      body: { ...validOrder(), merchantReference },
    });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ type: `${PROBLEM}invalid-request` });
    expect(await tenantCounts(api.pool, acme.tenantId)).toEqual(before);
  });

  it('100 visible ASCII characters are accepted', async () => {
    const ref = `${uniq('r')}${'~'.repeat(100)}`.slice(-100);
    const res = await create(acme, uniq('idem'), ref);
    expect(res.status).toBe(202);
    expect((res.body as OrderBody).merchantReference).toBe(ref);
  });
});
