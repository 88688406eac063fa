/**
 * The library as a user gets it: `npm run build:lib` and `npm pack`, the
 * tarball installed into a temporary project with examples/subscription-renewal
 * copied in, type-checked against the published declarations, and run on the
 * run's Temporal dev server with the provider's first response lost. One
 * charge at the provider, whatever the retries.
 */
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { createPool } from '../../src/db/index.ts';
import { applyLedgerMigrations } from '../../src/lib/migrations.ts';
import { emptyDatabase } from '../support/env.ts';

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, '../..');
const example = path.join(root, 'examples/subscription-renewal');

/** This process's environment without npm's per-script variables, so a nested npm sees only its own project. */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!/^npm_/i.test(k)) env[k] = v;
  return { ...env, ...extra };
}

function sh(cmd: string, args: string[], cwd: string, env: Record<string, string> = {}) {
  return run(cmd, args, { cwd, env: cleanEnv(env), maxBuffer: 32 * 1024 * 1024 });
}

describe('onceflow as a library', () => {
  const dropped: (() => Promise<void>)[] = [];
  let work: string;
  let tarball: string;

  beforeAll(async () => {
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'onceflow-example-'));
    await sh('npm', ['run', '--silent', 'build:lib'], root);
    const { stdout } = await sh('npm', ['pack', '--silent', '--pack-destination', work], root);
    tarball = path.join(work, stdout.trim().split('\n').pop()!);
  }, 120_000);

  afterAll(async () => {
    for (const drop of dropped) await drop();
    if (work) fs.rmSync(work, { recursive: true, force: true });
  });

  it('packs only the built library, the ledger SQL and the license: no dev/, test/, bench/ or examples/', async () => {
    const { stdout } = await sh('tar', ['-tzf', tarball], work);
    const files = stdout.trim().split('\n');
    expect(files).toContain('package/dist/lib/src/lib/index.js');
    expect(files).toContain('package/dist/lib/src/lib/index.d.ts');
    expect(files).toContain('package/migrations/0002_ledger.sql');
    expect(files).toContain('package/LICENSE');
    expect(files.filter((f) => /^package\/(dev|test|bench|examples|scripts)\//.test(f))).toEqual([]);
    expect(
      files.filter(
        (f) =>
          !/^package\/(dist\/lib\/|migrations\/|package\.json$|README\.md$|LICENSE$|bin\/onceflow\.js$)/.test(
            f,
          ),
      ),
    ).toEqual([]);
  });

  it('runs the example from the tarball: a lost charge response still makes exactly one charge', async () => {
    const project = path.join(work, 'project');
    fs.cpSync(example, project, {
      recursive: true,
      filter: (src) => !/[/\\](node_modules|dist)$/.test(src),
    });
    const manifest = JSON.parse(fs.readFileSync(path.join(project, 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
    };
    manifest.dependencies.onceflow = `file:${tarball}`;
    fs.writeFileSync(path.join(project, 'package.json'), JSON.stringify(manifest, null, 2));

    await sh('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'], project);
    await sh('npx', ['tsc', '--noEmit'], project);
    await sh('npx', ['tsc'], project);

    const db = await emptyDatabase('renewal');
    dropped.push(db.drop);
    const { stdout } = await sh('node', ['dist/main.js'], project, {
      DATABASE_URL: db.url,
      TEMPORAL_ADDRESS: inject('temporalAddress'),
      DROP_FIRST_RESPONSE: '1',
    });
    const report = JSON.parse(stdout.trim().split('\n').pop()!) as {
      workflowId: string;
      status: string;
      result: { chargeId: string; paidThrough: string };
      migrationsApplied: string[];
      effects: number;
      subscription: { paid_through: string; renewals: number };
      records: { key: string; state: string; attempts: number }[];
    };

    expect(report.status).toBe('COMPLETED');
    expect(report.effects).toBe(1);
    expect(report.result).toEqual({ chargeId: 'ch_1', paidThrough: '2026-12' });
    expect(report.subscription).toEqual({ paid_through: '2026-12', renewals: 1 });
    expect(report.migrationsApplied).toEqual(['0002_ledger']);
    // The charge's first attempt lost its answer (unknown); the second reconciled it by key.
    expect(report.records.sort((a, b) => a.key.localeCompare(b.key))).toEqual([
      { key: `${report.workflowId}/charge`, state: 'succeeded', attempts: 2 },
      { key: `${report.workflowId}/extend`, state: 'succeeded', attempts: 1 },
    ]);
  }, 300_000);

  it("applyLedgerMigrations creates only the ledger's table, and a second run applies nothing", async () => {
    const db = await emptyDatabase('ledger');
    dropped.push(db.drop);
    const pool = createPool(db.url, { max: 2 });
    try {
      expect(await applyLedgerMigrations(pool)).toEqual(['0002_ledger']);
      expect(await applyLedgerMigrations(pool)).toEqual([]);
      const { rows } = await pool.query<{ table_name: string }>(
        "select table_name from information_schema.tables where table_schema = 'public' order by 1",
      );
      expect(rows.map((r) => r.table_name)).toEqual(['onceflow_ledger_migrations', 'operations']);
    } finally {
      await pool.end();
    }
  });
});
