/**
 * The pre-built workflow bundle (src/worker/bundle.ts): a worker runs the
 * code its sources say today. A bundle is reused only while the sources it
 * was built from are unchanged; a change to a workflow file or to a module
 * it imports produces a new bundle, and the worker runs the new code.
 */
import fs from 'node:fs';
import path from 'node:path';
import { inject } from 'vitest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Worker, type NativeConnection } from '@temporalio/worker';
import type { Client } from '@temporalio/client';
import { ensureWorkflowBundle } from '../../src/worker/bundle.ts';
import { nativeConnection, temporalClient, uniq } from '../support/env.ts';

describe('workflow bundle cache', () => {
  let connection: NativeConnection;
  let client: Client;
  let closeClient: () => Promise<void>;
  let root: string;

  beforeAll(async () => {
    // Inside the repository, so the bundler resolves @temporalio/workflow from node_modules.
    root = path.join(inject('dataDir'), uniq('bundle'));
    fs.mkdirSync(path.join(root, 'workflows'), { recursive: true });
    fs.mkdirSync(path.join(root, 'lib'), { recursive: true });
    fs.writeFileSync(path.join(root, 'workflows/index.ts'), "export { probeWorkflow } from './probe.ts';\n");
    fs.writeFileSync(
      path.join(root, 'workflows/probe.ts'),
      [
        "import type { Shape } from '../lib/types.ts';",
        "import { answer } from '../lib/answer.ts';",
        'export async function probeWorkflow(): Promise<Shape> {',
        '  return { answer };',
        '}',
        '',
      ].join('\n'),
    );
    fs.writeFileSync(path.join(root, 'lib/types.ts'), 'export interface Shape { answer: string }\n');
    setAnswer('v1');
    connection = await nativeConnection();
    ({ client, close: closeClient } = await temporalClient());
  });
  afterAll(async () => {
    await closeClient?.();
    await connection?.close();
    if (root) fs.rmSync(root, { recursive: true, force: true });
  });

  const setAnswer = (v: string) =>
    fs.writeFileSync(path.join(root, 'lib/answer.ts'), `export const answer = '${v}';\n`);
  const ensure = () =>
    ensureWorkflowBundle({
      workflowsPath: path.join(root, 'workflows/index.ts'),
      dir: path.join(root, 'bundles'),
    });
  /** Runs probeWorkflow on a worker that loads exactly this bundle file. */
  async function runProbe(codePath: string): Promise<unknown> {
    const taskQueue = uniq('bundle');
    const worker = await Worker.create({ connection, taskQueue, workflowBundle: { codePath } });
    return worker.runUntil(
      client.workflow.execute('probeWorkflow', { taskQueue, workflowId: uniq('probe'), args: [] }),
    );
  }

  it('builds once, reuses the bundle while the sources are unchanged, rebuilds when an imported module changes', async () => {
    const first = await ensure();
    expect(first.built).toBe(true);
    expect(await runProbe(first.path)).toEqual({ answer: 'v1' });

    const again = await ensure();
    expect(again).toEqual({ ...first, built: false });

    // A type-only import is erased by the bundler: editing it needs no rebuild.
    fs.appendFileSync(path.join(root, 'lib/types.ts'), 'export type Unused = number;\n');
    expect((await ensure()).built).toBe(false);

    // The module that changes is outside workflows/, reached through an import.
    setAnswer('v2');
    const changed = await ensure();
    expect(changed.built).toBe(true);
    expect(changed.path).not.toBe(first.path);
    expect(fs.existsSync(first.path)).toBe(false); // the stale bundle is gone, not just shadowed
    expect(await runProbe(changed.path)).toEqual({ answer: 'v2' });
  });

  it('keeps a traced and an untraced variant of the product bundle side by side; only the traced one has the tracing interceptors', async () => {
    const plain = await ensureWorkflowBundle();
    const traced = await ensureWorkflowBundle({ traced: true });
    expect(path.basename(plain.path)).toMatch(/^workflows-[0-9a-f]+\.js$/);
    expect(path.basename(traced.path)).toMatch(/^workflows-traced-[0-9a-f]+\.js$/);
    expect(traced.hash).not.toBe(plain.hash);
    // Building or finding one never removes the other.
    expect(fs.existsSync(plain.path)).toBe(true);
    expect(fs.existsSync(traced.path)).toBe(true);
    expect(fs.readFileSync(traced.path, 'utf8')).toContain('OpenTelemetryInboundInterceptor');
    expect(fs.readFileSync(plain.path, 'utf8')).not.toContain('OpenTelemetryInboundInterceptor');
  });
});
