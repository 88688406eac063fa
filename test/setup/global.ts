/**
 * The integration tier's global setup: one real Postgres template database and
 * one real Temporal server for the whole run. Each test file gets its own clone
 * of the template (test/setup/runtime.ts). Nothing is mocked and nothing is
 * skipped: if a service is missing, the run fails here and says what is missing.
 * The fast tier (test/setup/global-unit.ts) sets up Postgres alone.
 */
import type { TestProject } from 'vitest/node';
import { execFile, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import { loadConfig } from '../../src/config.ts';
import { createPool } from '../../src/db/index.ts';
import { createThrowawayDatabase } from '../../src/db/migrate.ts';
import { closeTemplate, dropDatabasesWithPrefix } from '../support/database.ts';
import { seedDemoData } from '../../dev/seed.ts';
import { applySandboxMigrations } from '../../dev/sandbox/migrate.ts';
import {
  ensureTemporalCli,
  startDevServerOnFreePorts,
  waitForTemporal,
  type DevServer,
} from '../../dev/devserver/temporal.ts';
import {
  dropTemporalDatabases,
  ensureTemporalServerTools,
  startTemporalServerOnFreePorts,
} from '../../dev/devserver/temporal-server.ts';
import { ensureWorkflowBundle } from '../../src/worker/bundle.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    // The fast tier provides only the first two: a test there that asks for the others gets undefined.
    /** The Postgres server (its URL, with any database name): tests connect only to their own clones. */
    postgresUrl: string;
    /** The run's migrated, seeded template; it refuses connections (clone it, never use it). */
    databaseTemplate: string;
    temporalAddress: string;
    temporalUiUrl: string;
    workflowBundlePath: string;
    /** The variant with the tracing interceptors, which a worker with tracing on uses. */
    tracedWorkflowBundlePath: string;
    dataDir: string;
    /** The run's compiled app (tsconfig.app.json's entry points as JavaScript), laid out as dist/app. */
    appBuild: string;
  }
}

export default function setup(project: TestProject) {
  return setupRun(project, { temporal: true });
}

export async function setupRun(project: TestProject, opts: { temporal: boolean }) {
  const root = path.resolve(import.meta.dirname, '../..');
  const config = loadConfig(process.env, root);
  const runId = `${process.pid}_${randomBytes(3).toString('hex')}`;
  const dataDir = path.join(config.dataDir, 'test', runId);
  fs.mkdirSync(dataDir, { recursive: true });

  // --- Postgres: a template of our own, never the user's data. Every database this run
  // creates (the template, each file's clone) starts with this prefix.
  const databasePrefix = `onceflow_test_${runId}`;
  const databaseTemplate = databasePrefix;
  const database = await createThrowawayDatabase(config.databaseUrl, databaseTemplate);
  const databaseUrl = database.url;
  // The sandbox's tables (its own chain, dev/sandbox/migrations/): tests run the sandbox in-process too.
  await applySandboxMigrations(databaseUrl);

  // The app's entry points compiled once for the run, in the background while the Temporal server
  // starts: the tests' child processes start from it as the image does, without tsx's loader.
  // Under the repo, so the build finds node_modules and the package root by walking up.
  const appBuild = path.join(root, 'dist/test', runId);
  let appBuilt: Promise<unknown> | undefined;
  let server: DevServer | undefined;
  // TEMPORAL_BACKEND=postgres: the server's two databases, per run, dropped in teardown.
  const temporalDatabases = {
    postgresUrl: config.temporal.postgres.url,
    database: `onceflow_test_temporal_${runId}`,
    visibilityDatabase: `onceflow_test_temporal_vis_${runId}`,
  };
  const teardown = async () => {
    await server?.stop();
    await appBuilt?.catch(() => undefined);
    fs.rmSync(appBuild, { recursive: true, force: true });
    // The template, and any clone a file could not drop (its process died).
    await dropDatabasesWithPrefix(config.databaseUrl, databasePrefix);
    if (config.temporal.backend === 'postgres' && !config.temporal.external) {
      await dropTemporalDatabases(temporalDatabases);
    }
    if (process.env.KEEP_TEST_DATA !== '1') {
      // Keep artifacts (screenshots) but drop the bulky server state.
      fs.rmSync(path.join(dataDir, 'temporal.sqlite'), { force: true });
    }
  };
  try {
    // --- Demo tenants and keys: the seed step local runs use (migrations don't carry them).
    const seedPool = createPool(databaseUrl, { max: 1 });
    try {
      await seedDemoData(seedPool, '127.0.0.1');
    } finally {
      await seedPool.end();
    }
    // Cloning needs a template nobody is connected to: from here on nobody can be.
    await closeTemplate(config.databaseUrl, databaseTemplate);
    project.provide('postgresUrl', config.databaseUrl);
    project.provide('databaseTemplate', databaseTemplate);
    project.provide('dataDir', dataDir);
    if (!opts.temporal) return teardown;

    // Type-checked by `npm run typecheck`; here only emitted. The core package goes inside the
    // build (node_modules/onceflow, found first from the build's files), so a run's children never
    // read packages/onceflow/dist while a run beside it rebuilds that (the re-runs of npm test).
    const tsc = (...args: string[]) =>
      promisify(execFile)(process.execPath, [path.join(root, 'node_modules/typescript/bin/tsc'), ...args], {
        cwd: root,
      });
    const core = path.join(appBuild, 'node_modules/onceflow');
    appBuilt = Promise.all([
      tsc('-p', 'tsconfig.app.json', '--outDir', appBuild, '--noCheck'),
      tsc('-p', 'packages/onceflow/tsconfig.build.json', '--outDir', path.join(core, 'dist'), '--noCheck'),
    ]).then(() =>
      fs.copyFileSync(path.join(root, 'packages/onceflow/package.json'), path.join(core, 'package.json')),
    );
    appBuilt.catch(() => undefined); // awaited below; a failure meanwhile is not "unhandled"

    // --- Temporal: TEMPORAL_ADDRESS if given, otherwise a dev server of our own on free ports.
    let temporalAddress = config.temporal.address;
    let temporalUiUrl = config.temporal.uiUrl;
    if (config.temporal.external) {
      await waitForTemporal(temporalAddress, 60_000);
    } else if (config.temporal.backend === 'postgres') {
      const tools = await ensureTemporalServerTools({ toolsDir: config.toolsDir });
      server = await startTemporalServerOnFreePorts({ tools, databases: temporalDatabases, dataDir });
      temporalAddress = server.address;
      temporalUiUrl = server.uiUrl ?? temporalUiUrl;
    } else {
      const cli = await ensureTemporalCli({ toolsDir: config.toolsDir });
      server = await startDevServerOnFreePorts({
        cli,
        ui: true,
        dbFile: path.join(dataDir, 'temporal.sqlite'),
        logFile: path.join(dataDir, 'temporal.log'),
      });
      temporalAddress = server.address;
      temporalUiUrl = server.uiUrl ?? temporalUiUrl;
    }

    // --- The core package's build (packages/onceflow/dist), once per run: the tests that install
    // it as a user does (the packed tarball, the production install) read it and never rebuild it,
    // so two of them in parallel never race on it.
    execFileSync('npm', ['run', '--silent', 'build', '-w', 'onceflow'], { cwd: root, stdio: 'inherit' });

    // --- Workflow bundle: the one `npm start` uses, keyed by a hash of the workflow code
    // (built here only when that code changed), instead of once per worker.
    // With the smoke probe, as `npm start`'s workers (WORKER_SMOKE_WORKFLOW=on) build it.
    const { path: workflowBundlePath } = await ensureWorkflowBundle({ smoke: true });
    const { path: tracedWorkflowBundlePath } = await ensureWorkflowBundle({ traced: true, smoke: true });

    await appBuilt;
    project.provide('appBuild', appBuild);
    project.provide('temporalAddress', temporalAddress);
    project.provide('temporalUiUrl', temporalUiUrl);
    project.provide('workflowBundlePath', workflowBundlePath);
    project.provide('tracedWorkflowBundlePath', tracedWorkflowBundlePath);
  } catch (err) {
    // A failed setup gets no teardown call from vitest: clean up here.
    await teardown();
    throw err;
  }
  return teardown;
}
