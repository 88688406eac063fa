/**
 * Issue 43, item 8 (docs/OPERATIONS.md, Logs): when the SDK core retries a local activity inside the
 * workflow task, it leaves the failed attempt's start-to-close timer running. Once the worker has
 * shut down while the SDK's runtime lives on (another connection open: a test file after one of
 * its stacks closed), that timer fires into the closed worker and the core panics. Our local
 * activities back off on a workflow timer instead (workflows/policies.ts), so no attempt's timer
 * outlives it. The panic is written by Rust straight to the process's stderr, past Node's
 * streams, so the scenario runs in a child process (fixtures/local-retry-after-shutdown.ts).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureWorkflowBundle } from '../../src/worker/bundle.ts';
import { spawnEntry } from '../support/processes.ts';
import { temporalAddress, uniq } from '../support/env.ts';

const PANIC = 'receive half not dropped';
const WORKFLOWS = path.resolve(import.meta.dirname, 'fixtures/local-retry-workflows.ts');

type Threshold = 'policy' | 'sdk-default';
const runs = new Map<Threshold, { code: number | null; output: string }>();
let bundleDir: string | undefined;

async function runScenario(bundlePath: string, threshold: Threshold): Promise<void> {
  const proc = spawnEntry(
    `local retry (${threshold})`,
    'test/worker/fixtures/local-retry-after-shutdown.ts',
    {},
    [temporalAddress(), bundlePath, uniq('local-retry'), threshold],
  );
  const { code } = await proc.exited;
  runs.set(threshold, { code, output: proc.output() });
}

beforeAll(async () => {
  bundleDir = fs.mkdtempSync(path.join(os.tmpdir(), 'onceflow-local-retry-'));
  const bundle = await ensureWorkflowBundle({
    workflowsPath: WORKFLOWS,
    interceptorModules: [],
    dir: bundleDir,
  });
  // Both at once: each waits out a start-to-close timeout after its worker has shut down.
  await Promise.all([runScenario(bundle.path, 'policy'), runScenario(bundle.path, 'sdk-default')]);
});
afterAll(() => {
  if (bundleDir) fs.rmSync(bundleDir, { recursive: true, force: true });
});

describe('a local activity retried just before its worker shuts down', () => {
  it('with our options, leaves no timer behind to panic the SDK core', () => {
    const run = runs.get('policy')!;
    expect(run.code, run.output).toBe(0);
    expect(run.output, 'the first attempt failed and the second ran').toContain('{"attempt":2}');
    expect(run.output).not.toContain(PANIC);
  });

  // The control: the same scenario with the SDK's default threshold (retries inside the task)
  // panics, so the check above can fail. Once an SDK upgrade stops it, the defect is fixed
  // upstream and localRetryThreshold can go back to its default (docs/OPERATIONS.md, Logs).
  it("with the SDK's in-task retries, the core panics (the defect this works around)", () => {
    const run = runs.get('sdk-default')!;
    expect(run.code, run.output).toBe(0);
    expect(run.output).toContain('{"attempt":2}');
    expect(run.output).toContain(PANIC);
  });
});
