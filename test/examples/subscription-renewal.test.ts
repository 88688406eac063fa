/**
 * onceflow as a user gets it: packages/onceflow packed, the tarball installed
 * into a copy of examples/subscription-renewal, the copy type-checked against
 * the published declarations and run on the run's Temporal dev server with
 * the provider's first response lost. One charge per period at the provider,
 * whatever the retries.
 */
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { emptyDatabase } from '../support/env.ts';
import { installExample, packOnceflow, sh, unbuiltSources } from './example-project.ts';

describe('examples/subscription-renewal, from the packed onceflow', () => {
  const dropped: (() => Promise<void>)[] = [];
  let work: string;
  let tarball: string;
  let project: string;

  beforeAll(async () => {
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'onceflow-renewal-'));
    tarball = await packOnceflow(work);
    project = await installExample('subscription-renewal', work, tarball);
  }, 600_000);

  afterAll(async () => {
    for (const drop of dropped) await drop();
    if (work) fs.rmSync(work, { recursive: true, force: true });
  });

  it('packs the built package, its declarations, the ledger SQL and the license, and nothing else', async () => {
    const { stdout } = await sh('tar', ['-tzf', tarball], work);
    const files = stdout.trim().split('\n');
    for (const file of ['index', 'workflow']) {
      expect(files).toContain(`package/dist/${file}.js`);
      expect(files).toContain(`package/dist/${file}.d.ts`);
    }
    expect(files).toContain('package/migrations/0001_ledger.sql');
    expect(files).toContain('package/LICENSE');
    expect(
      files.filter(
        (f) =>
          !/^package\/(dist\/[^/]+\.(js|d\.ts)|migrations\/[^/]+\.sql|package\.json|README\.md|CHANGELOG\.md|LICENSE)$/.test(
            f,
          ),
      ),
    ).toEqual([]);
  });

  it('type-checks and builds against the published declarations (in beforeAll: tsc fails on a type error)', () => {
    expect(unbuiltSources(project)).toEqual([]);
  });

  it('charges each period once though the first charge response is lost, keyed <workflowId>/charge/<period>', async () => {
    const db = await emptyDatabase('renewal');
    dropped.push(db.drop);
    const { stdout } = await sh('node', ['dist/main.js'], project, {
      env: { DATABASE_URL: db.url, TEMPORAL_ADDRESS: inject('temporalAddress'), DROP_FIRST_RESPONSE: '1' },
      timeoutMs: 120_000,
    });
    const report = JSON.parse(stdout.trim().split('\n').pop()!) as {
      workflowId: string;
      status: string;
      result: { chargeIds: string[]; paidThrough: string };
      migrationsApplied: string[];
      effects: number;
      chargeRequests: number;
      subscription: { paid_through: string; renewals: number };
      records: { key: string; state: string; attempts: number }[];
    };

    expect(report.status).toBe('COMPLETED');
    expect(report.migrationsApplied).toEqual(['0001_ledger']);
    expect(report.effects).toBe(2);
    // The lost charge was found by key, never asked for again.
    expect(report.chargeRequests).toBe(2);
    expect(report.result).toEqual({ chargeIds: ['ch_1', 'ch_2'], paidThrough: '2026-12' });
    expect(report.subscription).toEqual({ paid_through: '2026-12', renewals: 2 });
    // The first charge lost its answer (unknown); the retry took it over and reconciled it by key.
    expect(report.records.sort((a, b) => a.key.localeCompare(b.key))).toEqual([
      { key: `${report.workflowId}/charge/2026-11`, state: 'succeeded', attempts: 2 },
      { key: `${report.workflowId}/charge/2026-12`, state: 'succeeded', attempts: 1 },
      { key: `${report.workflowId}/extend/2026-11`, state: 'succeeded', attempts: 1 },
      { key: `${report.workflowId}/extend/2026-12`, state: 'succeeded', attempts: 1 },
    ]);
  }, 180_000);

  it("the package's migrate creates only the ledger's tables, and a second run applies nothing", async () => {
    const db = await emptyDatabase('migrate');
    dropped.push(db.drop);
    // As a user's own script would: `onceflow` and `pg` resolved from the example's node_modules.
    const script = `
      import pg from 'pg';
      import { migrate } from 'onceflow';
      const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 2 });
      const first = await migrate(pool);
      const second = await migrate(pool);
      const { rows } = await pool.query(
        "select table_name from information_schema.tables where table_schema = 'public' order by 1");
      await pool.end();
      console.log(JSON.stringify({ first, second, tables: rows.map((r) => r.table_name) }));`;
    const { stdout } = await sh('node', ['--input-type=module', '-e', script], project, {
      env: { DATABASE_URL: db.url },
      timeoutMs: 60_000,
    });
    expect(JSON.parse(stdout)).toEqual({
      first: ['0001_ledger'],
      second: [],
      tables: ['onceflow_migrations', 'operations'],
    });
  });
});
