/**
 * Production workers don't register the smoke probe: its workflow is not in
 * the production bundle's entry, and its activity only comes when asked for
 * (WORKER_SMOKE_WORKFLOW=on: `npm start`'s self-check, tests, bench).
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { createActivities, type ActivityDeps } from '../../activities/index.ts';
import { loadConfig } from '../../src/config.ts';

const root = path.resolve(import.meta.dirname, '../..');
// Wiring reads no dependency until an activity runs.
const deps = {} as ActivityDeps;

describe('the smoke probe is not part of a production worker', () => {
  it('registers the smoke activity only when asked', () => {
    expect(Object.keys(createActivities(deps))).not.toContain('recordSmokeWrite');
    expect(Object.keys(createActivities(deps, { smoke: true }))).toContain('recordSmokeWrite');
  });

  it('keeps smokeWorkflow out of the production bundle entry', () => {
    const prod = fs.readFileSync(path.join(root, 'workflows/index.ts'), 'utf8');
    const dev = fs.readFileSync(path.join(root, 'workflows/with-smoke.ts'), 'utf8');
    expect(prod).not.toMatch(/smoke/);
    expect(dev).toMatch(/export \{ smokeWorkflow \} from '\.\/smoke\.ts'/);
  });

  it('is off unless WORKER_SMOKE_WORKFLOW=on', () => {
    const base = { DATABASE_URL: 'postgres://127.0.0.1/x' };
    expect(loadConfig(base).workerSmokeWorkflow).toBe(false);
    expect(loadConfig({ ...base, WORKER_SMOKE_WORKFLOW: 'on' }).workerSmokeWorkflow).toBe(true);
  });
});
