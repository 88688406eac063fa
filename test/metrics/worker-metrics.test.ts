/**
 * The worker's /metrics carries the Temporal SDK's own worker metrics next to
 * ours. Runs in a child process because the SDK runtime is process-wide and
 * installed once (the test process already has one).
 */
import { afterAll, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { freePort } from '../../src/devserver/ports.ts';
import { temporalAddress, uniq, workflowBundlePath } from '../support/env.ts';

const root = path.resolve(import.meta.dirname, '../..');
let child: ChildProcess | undefined;

afterAll(async () => {
  if (child && child.exitCode === null) {
    const exited = new Promise((r) => child!.once('exit', r));
    child.kill('SIGTERM');
    await exited;
  }
});

it('serves onceflow and temporal_ worker metrics from one endpoint', async () => {
  const sdkPort = await freePort();
  child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      'test/metrics/fixtures/worker-metrics.ts',
      temporalAddress(),
      workflowBundlePath(),
      String(sdkPort),
      uniq('metrics'),
    ],
    { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    child!.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const line = out.split('\n').find((l) => l.startsWith('{'));
      if (line) resolve((JSON.parse(line) as { url: string }).url);
    });
    child!.once('exit', (code) => reject(new Error(`fixture exited with ${code}: ${stderr}`)));
  });

  // The SDK's exporter fills in once the worker polls; allow it a few seconds.
  const deadline = Date.now() + 20_000;
  let body = '';
  while (Date.now() < deadline) {
    body = await (await fetch(url)).text();
    if (/^temporal_num_pollers\{/m.test(body)) break;
    await new Promise((r) => setTimeout(r, 500));
  }
  expect(body).toMatch(/^temporal_num_pollers\{/m);
  expect(body).toMatch(/^temporal_worker_start\{/m);
  expect(body).toContain(
    `onceflow_metrics_source_up{source="http://127.0.0.1:${sdkPort}/metrics",service="worker"} 1`,
  );
  expect(body).toContain('process_resident_memory_bytes{service="worker"}');
  // The merged output must stay parseable: no metric family declared twice.
  const families = [...body.matchAll(/^# TYPE (\S+)/gm)].map((m) => m[1]);
  expect(new Set(families).size).toBe(families.length);
});
