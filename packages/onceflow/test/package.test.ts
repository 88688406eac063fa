/**
 * The package is what its users install: `npm pack` it, install the tarball
 * into an empty project beside its two peers, and look at what arrived. None
 * of the app's dependencies, a handful of names, its three entry points working
 * from dist/, declarations a TypeScript user can compile against, and
 * `migrate` + the ledger running against Postgres from the installed copy.
 *
 * Needs the npm registry (for pg and @temporalio/activity; --prefer-offline
 * uses the local cache first). `npm pack` runs `prepack`, which rebuilds dist/.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { testDatabaseUrl, uniq } from './support/env.ts';

const packageDir = path.resolve(import.meta.dirname, '..');
const manifest = JSON.parse(fs.readFileSync(path.join(packageDir, 'package.json'), 'utf8')) as {
  name: string;
  peerDependencies: Record<string, string>;
};

/** What the package's entry point exports at runtime: the whole public surface. */
const PUBLIC_NAMES = [
  'FinalFailure',
  'LEDGER_FAILURE',
  'Ledger',
  'LedgerError',
  'LocalStatement',
  'currentStepKey',
  'downstreamKey',
  'externalStep',
  'heartbeatRenewal',
  'isLedgerError',
  'localStep',
  'migrate',
  'stepKey',
  'toActivityFailure',
  'withinKeyWindow',
];

/** The app's dependencies: none may reach a user through the package. */
const APP_ONLY = ['fastify', 'stripe', 'nodemailer', 'pino', 'prom-client', 'tsx', 'undici', 'commander'];
const APP_ONLY_PATTERNS = [/^@opentelemetry\/sdk-/];

/**
 * The environment for the npm commands: without the npm_* variables of an
 * `npm test` that started this run (workspace, prefix, package), which would
 * point the temporary project's npm at this repository.
 */
function npmEnv(): NodeJS.ProcessEnv {
  const keep = new Set(['npm_config_cache', 'npm_config_userconfig', 'npm_config_registry']);
  return Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !k.toLowerCase().startsWith('npm_') || keep.has(k)),
  );
}

/** Runs a command to completion within `timeoutMs`; fails with its output if it fails. */
function run(cmd: string, args: string[], cwd: string, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      cmd,
      args,
      { cwd, env: npmEnv(), timeout: timeoutMs, killSignal: 'SIGKILL', maxBuffer: 64 * 1024 * 1024 },
      (err, stdout, stderr) => {
        if (err) {
          const why = err.killed ? `timed out after ${timeoutMs} ms` : `failed (${String(err.code)})`;
          reject(new Error(`${cmd} ${args.join(' ')} in ${cwd} ${why}:\n${stderr}\n${stdout}`.trim()));
          return;
        }
        resolve(stdout);
      },
    );
  });
}

let tmp: string;
let tarball: string;
let project: string;

beforeAll(async () => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'onceflow-pack-'));
  // stdout is the pack report; prepack's build output goes to stderr.
  const packed = JSON.parse(
    await run('npm', ['pack', '--json', '--pack-destination', tmp], packageDir, 300_000),
  ) as [{ filename: string }];
  tarball = path.join(tmp, packed[0].filename);

  project = path.join(tmp, 'project');
  fs.mkdirSync(project);
  fs.writeFileSync(
    path.join(project, 'package.json'),
    JSON.stringify({ name: 'onceflow-user', version: '1.0.0', private: true, type: 'module' }),
  );
  const peers = Object.entries(manifest.peerDependencies).map(([name, range]) => `${name}@${range}`);
  await run(
    'npm',
    ['install', '--no-audit', '--no-fund', '--prefer-offline', '--loglevel=error', tarball, ...peers],
    project,
    300_000,
  );
}, 660_000);

afterAll(() => {
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

describe('the packed tarball', () => {
  it('holds the build (JavaScript and declarations) and the migrations, and no sources or tests', async () => {
    const files = (await run('tar', ['-tzf', tarball], tmp, 60_000))
      .split('\n')
      .filter(Boolean)
      .map((f) => f.replace(/^package\//, ''));
    const sources = fs
      .readdirSync(path.join(packageDir, 'src'))
      .filter((f) => f.endsWith('.ts'))
      .map((f) => f.replace(/\.ts$/, ''));
    expect(sources).toContain('index');
    for (const name of sources) {
      expect(files).toContain(`dist/${name}.js`);
      expect(files).toContain(`dist/${name}.d.ts`);
    }
    const migrations = fs.readdirSync(path.join(packageDir, 'migrations')).filter((f) => f.endsWith('.sql'));
    expect(migrations.length).toBeGreaterThan(0);
    for (const file of migrations) expect(files).toContain(`migrations/${file}`);
    expect(files).toContain('package.json');
    expect(files.filter((f) => /^(src|test)\//.test(f) || /\.test\.|vitest|tsconfig/.test(f))).toEqual([]);
  });
});

describe('installed into an empty project', () => {
  it("brings none of the app's dependencies, and declares only its peers", async () => {
    const installed = (await run('npm', ['ls', '--all', '--omit=dev', '--parseable'], project, 120_000))
      .split('\n')
      .filter((p) => p.includes(`${path.sep}node_modules${path.sep}`))
      .map((p) => p.slice(p.lastIndexOf(`node_modules${path.sep}`) + 'node_modules/'.length));
    expect(installed).toContain('onceflow');
    expect(installed).toContain('pg');
    expect(installed).toContain('@temporalio/activity');
    const appOnly = installed.filter(
      (name) => APP_ONLY.includes(name) || APP_ONLY_PATTERNS.some((re) => re.test(name)),
    );
    expect(appOnly).toEqual([]);

    const installedManifest = JSON.parse(
      fs.readFileSync(path.join(project, 'node_modules/onceflow/package.json'), 'utf8'),
    ) as { dependencies?: Record<string, string>; peerDependencies?: Record<string, string> };
    expect(Object.keys(installedManifest.dependencies ?? {})).toEqual([]);
    expect(Object.keys(installedManifest.peerDependencies ?? {}).sort()).toEqual([
      '@temporalio/activity',
      'pg',
    ]);
  });

  it('exports a handful of names from dist/, runs migrate and the ledger, and onceflow/workflow and onceflow/postgres work', async () => {
    const schema = uniq('pkg_user').replace(/\W/g, '_').toLowerCase();
    const script = path.join(project, 'smoke.mjs');
    fs.writeFileSync(
      script,
      `
import pg from 'pg';
import * as onceflow from 'onceflow';
import * as workflow from 'onceflow/workflow';
import * as postgres from 'onceflow/postgres';

const [url, schema] = process.argv.slice(2);
const pool = new pg.Pool({ connectionString: url, max: 2, options: '-c search_path=' + schema });
try {
  const applied = await onceflow.migrate(pool, { schema });
  const again = await onceflow.migrate(pool, { schema });
  const ledger = new onceflow.Ledger(pool);
  const scope = { tenantId: 'user', operationType: 'smoke', key: workflow.stepKey('wf-1', 'smoke') };
  const input = { schemaVersion: 1, value: { n: 1 } };
  const first = await ledger.runLocal(scope, input, async () => ({ ran: 1 }));
  const replay = await ledger.runLocal(scope, input, async () => ({ ran: 2 }));
  console.log(JSON.stringify({
    names: Object.keys(onceflow).sort(),
    workflowNames: Object.keys(workflow).sort(),
    postgresNames: Object.keys(postgres).sort(),
    outcomeUnknown: workflow.LEDGER_FAILURE.outcomeUnknown,
    resolved: import.meta.resolve('onceflow'),
    key: scope.key, applied, again, first, replay,
  }));
} finally {
  await pool.end();
}
`,
    );
    const admin = new pg.Pool({ connectionString: testDatabaseUrl(), max: 1 });
    try {
      const out = JSON.parse(
        await run(process.execPath, [script, testDatabaseUrl(), schema], project, 60_000),
      ) as Record<string, unknown>;
      expect(out.names).toEqual(PUBLIC_NAMES);
      expect((out.names as string[]).length).toBeLessThanOrEqual(15);
      expect(out.workflowNames).toEqual(['LEDGER_FAILURE', 'stepKey']);
      expect(out.postgresNames).toEqual([
        'SQLSTATE',
        'backoffMs',
        'isSqlState',
        'pipelined',
        'withClient',
        'withTransaction',
      ]);
      expect(out.outcomeUnknown).toBe('OperationOutcomeUnknown');
      expect(out.resolved).toMatch(/\/node_modules\/onceflow\/dist\/index\.js$/);
      expect(out).toMatchObject({
        key: 'wf-1/smoke',
        applied: ['0001_ledger'],
        again: [],
        first: { result: { ran: 1 }, replayed: false },
        replay: { result: { ran: 1 }, replayed: true },
      });
      const { rows } = await admin.query<{ n: number }>(
        'select count(*)::int as n from information_schema.tables where table_schema = $1 and table_name = $2',
        [schema, 'operations'],
      );
      expect(rows[0]?.n).toBe(1);
    } finally {
      await admin.query(`drop schema if exists ${pg.escapeIdentifier(schema)} cascade`);
      await admin.end();
    }
  });

  it('its declarations type-check for a TypeScript user (names typed, not any)', async () => {
    fs.writeFileSync(
      path.join(project, 'user.ts'),
      `
import { Ledger, LEDGER_FAILURE, externalStep, type ExternalStepOptions, type Scope } from 'onceflow';
import { stepKey } from 'onceflow/workflow';

export const scope: Scope = { tenantId: 't', operationType: 'charge', key: stepKey('wf', 'charge') };
// @ts-expect-error: a step key is a string (were the declarations lost, it would be any)
export const wrong: number = stepKey('wf', 'charge');
// @ts-expect-error: a ledger needs a pool
export const noPool = new Ledger();
export const failure: 'OperationConflict' = LEDGER_FAILURE.conflict;
export type Options = ExternalStepOptions<{ chargeId: string }>;
export { externalStep };
`,
    );
    fs.writeFileSync(
      path.join(project, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          target: 'ES2022',
          strict: true,
          noEmit: true,
          types: [],
          // As most users have it, and needed here: this user installed no @types/pg. The
          // package's types still resolve, or the @ts-expect-error lines would fail as unused.
          skipLibCheck: true,
        },
        files: ['user.ts'],
      }),
    );
    const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
    await run(process.execPath, [tsc, '-p', project], project, 120_000);
  });
});
