/**
 * The OpenAPI document the API serves (built in-process, as src/api/main.ts
 * wires it: tenant routes, admin routes, /metrics) is valid OpenAPI 3.1 by a
 * real validator, and is shaped to generate a good client: every operation
 * has a unique operationId, every body and response schema is named, the
 * Idempotency-Key is required on POST /v1/orders, response headers are
 * documented, and the admin routes use their own security scheme.
 */
import { readFileSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { Validator } from '@seriousme/openapi-schema-validator';
import { liveOpenApiDocument } from '../../dev/codegen.ts';

type Obj = Record<string, unknown>;
interface Operation extends Obj {
  operationId?: string;
  security?: Record<string, string[]>[];
  parameters?: { name: string; in: string; required?: boolean }[];
  requestBody?: { content: Record<string, { schema: Obj }> };
  responses: Record<string, { headers?: Record<string, { required?: boolean }>; content?: Obj }>;
}

let doc: Obj & { paths: Record<string, Record<string, Operation>>; components: Obj };
const operations = () =>
  Object.entries(doc.paths).flatMap(([path, item]) =>
    Object.entries(item).map(([method, op]) => ({ path, method, op })),
  );

beforeAll(async () => {
  doc = (await liveOpenApiDocument()) as typeof doc;
});

it('is valid OpenAPI 3.1 (@seriousme/openapi-schema-validator)', async () => {
  const validator = new Validator();
  const res = await validator.validate(structuredClone(doc));
  expect(res.errors ?? []).toEqual([]);
  expect(res.valid).toBe(true);
  expect(validator.version).toBe('3.1');
});

it('the validator catches a broken document (the lint can fail)', async () => {
  const broken = structuredClone(doc);
  (broken.paths['/v1/orders']!.post!.responses as Obj)['202'] = { content: {} }; // no description
  const res = await new Validator().validate(broken);
  expect(res.valid).toBe(false);
});

it("info.version is package.json's version", () => {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
    version: string;
  };
  expect((doc.info as Obj).version).toBe(pkg.version);
});

it('every operation has a unique operationId', () => {
  const ops = operations();
  expect(ops.length).toBeGreaterThanOrEqual(12);
  const ids = ops.map(({ op, method, path }) => op.operationId ?? `missing: ${method} ${path}`);
  expect(ids.filter((id) => id.startsWith('missing'))).toEqual([]);
  expect(new Set(ids).size).toBe(ids.length);
});

it('every $ref resolves and no body or response has an anonymous object schema', () => {
  const schemas = doc.components.schemas as Record<string, Obj>;
  const anonymous: string[] = [];
  const refs: string[] = [];
  const walk = (node: unknown, at: string, inSchema: boolean) => {
    if (Array.isArray(node)) return node.forEach((n, i) => walk(n, `${at}/${i}`, inSchema));
    if (node === null || typeof node !== 'object') return;
    const o = node as Obj;
    if (typeof o.$ref === 'string') refs.push(o.$ref);
    // An object with named properties must be a $ref; a free-form map (additionalProperties only) may not.
    if (inSchema && 'properties' in o) anonymous.push(at);
    for (const [k, v] of Object.entries(o)) walk(v, `${at}/${k}`, inSchema || k === 'schema');
  };
  walk(doc.paths, '#/paths', false);
  // Inside a named schema, a nested object must be named too (a $ref).
  for (const [name, schema] of Object.entries(schemas)) {
    walk(schema.properties ?? {}, `#/components/schemas/${name}/properties`, true);
    walk(schema.anyOf ?? [], `#/components/schemas/${name}/anyOf`, true);
  }
  expect(anonymous).toEqual([]);
  for (const ref of refs) {
    expect(ref).toMatch(/^#\/components\/schemas\//);
    expect(schemas[ref.slice('#/components/schemas/'.length)], ref).toBeDefined();
  }
  expect(Object.keys(schemas)).toEqual(
    expect.arrayContaining(['CreateOrderRequest', 'Order', 'OrderDetail', 'OrderList', 'Problem']),
  );
});

describe('POST /v1/orders', () => {
  const op = () => doc.paths['/v1/orders']!.post!;

  it('documents the Idempotency-Key header as required', () => {
    const key = op().parameters?.find((p) => p.in === 'header' && p.name.toLowerCase() === 'idempotency-key');
    expect(key).toMatchObject({ required: true });
    expect(JSON.stringify(key)).not.toContain('x-documented-required');
  });

  it('documents Location (always), Idempotent-Replayed, Retry-After and the rate-limit headers', () => {
    const r = op().responses;
    expect(r['202']!.headers).toMatchObject({
      Location: { required: true },
      'Idempotent-Replayed': {},
      'x-ratelimit-limit': {},
      'x-ratelimit-remaining': {},
      'x-ratelimit-reset': {},
    });
    // Two 409s: idempotency-key-in-progress (Retry-After) and duplicate-merchant-reference (Location).
    expect(r['409']!.headers).toMatchObject({ 'Retry-After': {}, Location: {} });
    expect(r['429']!.headers).toMatchObject({ 'Retry-After': { required: true }, 'x-ratelimit-limit': {} });
  });

  it('documents Prefer (optional) and the 200 it can answer: the order as GET returns it', () => {
    const prefer = op().parameters?.find((p) => p.in === 'header' && p.name.toLowerCase() === 'prefer');
    expect(prefer).toBeDefined();
    expect(prefer?.required).not.toBe(true);
    const r = op().responses;
    expect(r['200']!.content).toMatchObject({
      'application/json': { schema: { $ref: '#/components/schemas/OrderDetail' } },
    });
    expect(r['200']!.headers).toMatchObject({
      Location: { required: true },
      'Preference-Applied': { required: true },
      Vary: { required: true },
      'Idempotent-Replayed': {},
    });
    expect(r['202']!.headers).toMatchObject({ 'Preference-Applied': {}, Vary: {} });
    // Only creating an order honours it; a refund's create does not document it.
    const refund = doc.paths['/v1/orders/{id}/refunds']!.post!;
    expect(refund.parameters?.some((p) => p.name.toLowerCase() === 'prefer')).toBe(false);
  });
});

it('tenant routes use the apiKey scheme, admin routes the separate adminToken scheme', () => {
  expect(Object.keys(doc.components.securitySchemes as Obj).sort()).toEqual(['adminToken', 'apiKey']);
  const admin = operations().filter(({ path }) => path.startsWith('/admin/'));
  expect(admin.map((o) => o.op.operationId).sort()).toEqual([
    'adminGetWebhookDelivery',
    'adminListWebhookDeliveries',
    'adminListWebhookEndpoints',
    'adminRedeliverWebhooks',
    'getAdminOrder',
    'getOperation',
    'listAttention',
    'listAudit',
    'listOperations',
    'previewRedrive',
    'reconcileOperation',
    'redriveOrder',
    'redriveRefund',
    'resolveOperation',
  ]);
  for (const { op } of admin) expect(op.security).toEqual([{ adminToken: [] }]);
  for (const { op } of operations().filter(({ path }) => path.startsWith('/v1/orders'))) {
    expect(op.security).toEqual([{ apiKey: [] }]);
  }
});
