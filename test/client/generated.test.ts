/**
 * The committed client files are what `npm run client:generate` would write
 * now: the document the API serves (built in-process, as src/api/main.ts
 * wires it) and the types generated from it. A route or schema change that
 * was not regenerated fails here.
 */
import { expect, it } from 'vitest';
import fs from 'node:fs/promises';
import { TERMINAL_ORDER_STATUSES } from '@onceflow/client';
import { OPENAPI_PATH, SCHEMA_PATH, liveOpenApiDocument, renderClientFiles } from '../../dev/codegen.ts';
import { TERMINAL_STATUSES } from '../../src/orders/model.ts';

it('packages/client/openapi.json and src/schema.d.ts match the live OpenAPI document (run npm run client:generate)', async () => {
  const doc = await liveOpenApiDocument();
  expect(Object.keys(doc.paths as object)).toContain('/v1/orders');
  const files = await renderClientFiles(doc);
  expect(await fs.readFile(OPENAPI_PATH, 'utf8')).toBe(files.openapi);
  expect(await fs.readFile(SCHEMA_PATH, 'utf8')).toBe(files.schema);
});

it('a changed document changes the generated types (the check can fail)', async () => {
  const doc = await liveOpenApiDocument();
  const paths = doc.paths as Record<string, unknown>;
  const changed = { ...doc, paths: { ...paths, '/v1/extra': paths['/healthz'] } };
  const files = await renderClientFiles(changed);
  expect(files.schema).not.toBe(await fs.readFile(SCHEMA_PATH, 'utf8'));
});

it("the client waits for the API's terminal order statuses (the package keeps its own copy)", () => {
  expect([...TERMINAL_ORDER_STATUSES].sort()).toEqual([...TERMINAL_STATUSES].sort());
});
