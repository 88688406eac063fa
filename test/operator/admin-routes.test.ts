/**
 * The admin routes: the same recovery actions over HTTP, behind a separate
 * admin token (a tenant API key is not enough), with problem+json errors.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import Fastify, { type FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { startOrderStack, type OrderStack } from '../support/stack.ts';
import { opsRoutes, type AuditEntry } from '../../src/operator/index.ts';
import { generateApiKey, hashApiKey } from '../../src/api/auth.ts';
import { insertApiKey } from '../../src/tenants/sql.ts';
import { PROBLEMS } from '../../src/http/problems.ts';
import { insertAudit, type AuditAction } from '../../src/audit/sql.ts';
import { uniq } from '../support/env.ts';
import { testOperator, unknownCharge } from './support.ts';

const ADMIN_TOKEN = 'admin_test_token_0123456789abcdef';
let stack: OrderStack;
let app: FastifyInstance;
let tenantKey: string;

beforeAll(async () => {
  stack = await startOrderStack({ startWorker: false });
  const operator = testOperator({
    pool: stack.pool,
    ledger: stack.ledger,
    temporal: stack.client,
    providerUrl: stack.sandbox.url,
    providerTimeoutMs: 1_500,
  });
  app = Fastify().withTypeProvider<TypeBoxTypeProvider>();
  await app.register(
    opsRoutes({
      operator,
      adminToken: ADMIN_TOKEN,
      operators: stack.pool,
      // Every request here comes from one address; the throttle has its own test (operators.test.ts).
      authFailure: { max: 1000, windowMs: 60_000 },
    }),
  );
  await app.ready();
  tenantKey = generateApiKey();
  await insertApiKey(stack.pool, { keyHash: hashApiKey(tenantKey), tenantId: 'acme', label: 'ops test' });
});
afterAll(async () => {
  await app?.close();
  await stack?.close();
});

const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };

describe('admin routes', () => {
  it.each([
    ['no Authorization header', undefined],
    ['a tenant API key', () => `Bearer ${tenantKey}`],
    ['a wrong token of the same length', () => `Bearer ${ADMIN_TOKEN.replace(/.$/, 'x')}`],
    ['a non-bearer scheme', () => `Basic ${Buffer.from(`admin:${ADMIN_TOKEN}`).toString('base64')}`],
  ])('rejects %s with 401 problem+json', async (_name, header) => {
    for (const [method, url] of [
      ['GET', '/admin/operations'],
      ['GET', '/admin/audit'],
      ['POST', '/admin/operations/resolve'],
      ['POST', '/admin/orders/acme/o1/redrive'],
    ] as const) {
      const res = await app.inject({
        method,
        url,
        headers: header ? { authorization: header() } : {},
        ...(method === 'POST' ? { payload: {} } : {}),
      });
      expect(res.statusCode, `${method} ${url}`).toBe(401);
      expect(res.headers['content-type']).toContain('application/problem+json');
      expect(res.headers['www-authenticate']).toMatch(/^Bearer/);
      expect(res.json()).toMatchObject({
        type: 'https://onceflow.dev/problems/admin-unauthorized',
        status: 401,
      });
    }
  });

  it('lists and shows operations', async () => {
    const key = await unknownCharge(stack.ledger, 'manual-charge');
    const list = await app.inject({
      method: 'GET',
      url: `/admin/operations?state=unknown&tenant=acme&keyPrefix=${encodeURIComponent(key)}&limit=10`,
      headers: admin,
    });
    expect(list.statusCode).toBe(200);
    const data = list.json<{ data: { key: string; state: string; ownerToken?: string }[] }>().data;
    expect(data).toHaveLength(1);
    expect(data[0]).toMatchObject({ key, state: 'unknown' });
    expect(data[0]).not.toHaveProperty('ownerToken');

    const show = await app.inject({
      method: 'GET',
      url: `/admin/operation?tenant=acme&type=payment.charge&key=${encodeURIComponent(key)}`,
      headers: admin,
    });
    expect(show.statusCode).toBe(200);
    expect(show.json()).toMatchObject({
      record: { key, state: 'unknown' },
      provider: { provider: 'payments', found: false },
      workflowId: null,
    });

    const missing = await app.inject({
      method: 'GET',
      url: '/admin/operation?tenant=acme&type=payment.charge&key=nothing-here',
      headers: admin,
    });
    expect(missing.statusCode).toBe(404);
    expect(missing.headers['content-type']).toContain('application/problem+json');

    const badQuery = await app.inject({
      method: 'GET',
      url: '/admin/operations?state=bogus',
      headers: admin,
    });
    expect(badQuery.statusCode).toBe(400);
    expect(badQuery.json()).toMatchObject({ type: 'https://onceflow.dev/problems/invalid-request' });
  });

  it('resolve requires a reason, then settles and audits with source api and the credential as actor', async () => {
    const key = await unknownCharge(stack.ledger, 'manual-charge');
    const body = { tenant: 'acme', type: 'payment.charge', key, outcome: 'failed', actor: 'carol' };
    const missing = await app.inject({
      method: 'POST',
      url: '/admin/operations/resolve',
      headers: admin,
      payload: body,
    });
    expect(missing.statusCode).toBe(400);
    const blank = await app.inject({
      method: 'POST',
      url: '/admin/operations/resolve',
      headers: admin,
      payload: { ...body, reason: '   ' },
    });
    expect(blank.statusCode).toBe(400);
    expect(blank.json().detail).toMatch(/reason is required/);
    const { rows: none } = await stack.pool.query('select 1 from audit_log where operation_key = $1', [key]);
    expect(none).toHaveLength(0);

    const ok = await app.inject({
      method: 'POST',
      url: '/admin/operations/resolve',
      headers: admin,
      payload: { ...body, reason: 'provider support confirmed no charge' },
    });
    expect(ok.statusCode).toBe(200);
    expect(ok.json()).toMatchObject({
      before: 'unknown',
      after: 'failed',
      workflowId: null,
      signalled: false,
    });

    const audit = await app.inject({
      method: 'GET',
      url: `/admin/audit?key=${encodeURIComponent(key)}`,
      headers: admin,
    });
    const entries = audit.json<{ data: AuditEntry[] }>().data;
    expect(entries).toHaveLength(1);
    expect(entries[0]).toMatchObject({
      // The body said carol; the shared admin token's actor is fixed.
      actor: 'admin-token',
      actorCredential: 'admin_token',
      source: 'api',
      action: 'resolve',
      reason: 'provider support confirmed no charge',
      before: { state: 'unknown' },
      after: { state: 'failed' },
    });

    const again = await app.inject({
      method: 'POST',
      url: '/admin/operations/resolve',
      headers: admin,
      payload: { ...body, reason: 'again' },
    });
    expect(again.statusCode).toBe(409);
    expect(again.json()).toMatchObject({ type: 'https://onceflow.dev/problems/operation-state' });
  });

  it('reconcile asks the provider and audits; redrive refuses orders that are not parked', async () => {
    const key = await unknownCharge(stack.ledger, 'manual-charge');
    const rec = await app.inject({
      method: 'POST',
      url: '/admin/operations/reconcile',
      headers: admin,
      payload: { tenant: 'acme', type: 'payment.charge', key, actor: 'dave' },
    });
    expect(rec.statusCode).toBe(200);
    // The sandbox never saw this downstream key: still unknown, and the attempt is on record.
    expect(rec.json()).toMatchObject({ changed: false, before: 'unknown', after: 'unknown' });
    const { rows } = await stack.pool.query('select action, source from audit_log where operation_key = $1', [
      key,
    ]);
    expect(rows).toEqual([{ action: 'reconcile', source: 'api' }]);

    const notFound = await app.inject({
      method: 'POST',
      url: '/admin/orders/acme/no-such-order/redrive',
      headers: admin,
      payload: { actor: 'dave', reason: 'try' },
    });
    expect(notFound.statusCode).toBe(404);

    const { input } = await stack.insertOrder();
    const notParked = await app.inject({
      method: 'POST',
      url: `/admin/orders/acme/${input.orderId}/redrive`,
      headers: admin,
      payload: { actor: 'dave', reason: 'try' },
    });
    expect(notParked.statusCode).toBe(409);
    expect(notParked.json().detail).toMatch(/accepted/);

    const attention = await app.inject({
      method: 'GET',
      url: '/admin/attention?tenant=acme',
      headers: admin,
    });
    expect(attention.statusCode).toBe(200);
    expect(Array.isArray(attention.json().data)).toBe(true);
  });

  it('accepts the bearer scheme in any case, as the tenant API does (RFC 9110)', async () => {
    for (const scheme of ['Bearer', 'bearer', 'BEARER']) {
      const res = await app.inject({
        method: 'GET',
        url: '/admin/attention',
        headers: { authorization: `${scheme} ${ADMIN_TOKEN}` },
      });
      expect(res.statusCode, scheme).toBe(200);
    }
  });

  it('refuses query numbers that are not spelled as numbers, instead of coercing them', async () => {
    for (const q of [
      'limit=100.5',
      'limit=true',
      'limit=1e2',
      'olderThanSeconds=abc',
      'olderThanSeconds=true',
    ]) {
      const res = await app.inject({ method: 'GET', url: `/admin/operations?${q}`, headers: admin });
      expect(res.statusCode, q).toBe(400);
      expect(res.headers['content-type']).toContain('application/problem+json');
      expect(res.json()).toMatchObject({
        type: 'https://onceflow.dev/problems/invalid-request',
        status: 400,
      });
    }
    const ok = await app.inject({
      method: 'GET',
      url: '/admin/operations?limit=5&olderThanSeconds=0.5',
      headers: admin,
    });
    expect(ok.statusCode).toBe(200);
  });

  it("errors come from the API's one problem+json implementation and never echo the URL", async () => {
    const marker = 'zqxmarker';
    const res = await app.inject({
      method: 'GET',
      url: `/admin/operation?tenant=acme&type=payment.charge&key=${marker}`,
      headers: admin,
    });
    expect(res.statusCode).toBe(404);
    expect(res.json()).toEqual({
      type: PROBLEMS.notFound.type,
      title: PROBLEMS.notFound.title,
      status: 404,
      detail: expect.any(String),
    });
    expect(res.body).not.toContain('/admin/operation');
  });
  it('the audit log filters by actor, action and text (reason, key or workflow ID), in the database', async () => {
    const tenant = uniq('audit');
    const row = (
      actor: string,
      action: AuditAction,
      reason: string,
      workflowId: string,
      key: string | null,
    ) =>
      insertAudit(stack.pool, {
        actor,
        source: 'api',
        actorCredential: 'operator_token',
        action,
        reason,
        tenantId: tenant,
        operationType: key ? 'payment.refund' : null,
        operationKey: key,
        workflowId,
        before: null,
        after: null,
      });
    const a = await row('alice', 'redrive', 'Provider BACK up', `refund/${tenant}/re_one`, null);
    const b = await row(
      'bob',
      'resolve',
      'support said 100%',
      `refund/${tenant}/re_two`,
      `refund/${tenant}/re_two/refund`,
    );
    const c = await row(
      'alice',
      'reconcile',
      'routine',
      `order/${tenant}/ord_three`,
      `order/${tenant}/ord_three/charge`,
    );
    const ids = async (query: string) => {
      const res = await app.inject({
        method: 'GET',
        url: `/admin/audit?tenant=${tenant}&${query}`,
        headers: admin,
      });
      expect(res.statusCode, query).toBe(200);
      return res.json<{ data: AuditEntry[] }>().data.map((e) => e.id);
    };
    expect(await ids('')).toEqual([c.id, b.id, a.id]);
    expect(await ids('actor=alice')).toEqual([c.id, a.id]);
    expect(await ids('action=resolve')).toEqual([b.id]);
    expect(await ids('actor=alice&action=redrive')).toEqual([a.id]);
    expect(await ids('q=back%20UP')).toEqual([a.id]); // the reason, case ignored
    expect(await ids('q=RE_TWO')).toEqual([b.id]); // the key and workflow ID
    expect(await ids('q=ord_three')).toEqual([c.id]);
    expect(await ids('q=100%25')).toEqual([b.id]); // % is text, not a pattern
    expect(await ids('q=%25')).toEqual([b.id]);
    expect(await ids('actor=nobody')).toEqual([]);
    const bad = await app.inject({ method: 'GET', url: '/admin/audit?action=delete', headers: admin });
    expect(bad.statusCode).toBe(400);
    expect(bad.headers['content-type']).toContain('application/problem+json');
  });
});
