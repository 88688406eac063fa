/**
 * The Temporal server on Postgres (TEMPORAL_BACKEND=postgres): its schema
 * setup is idempotent (a second run against the same databases changes
 * nothing) and the config it writes is the one docs/OPERATIONS.md describes.
 * Runs in the normal suite against throwaway databases; the server binaries
 * and the SQL tool are the real ones (built on first use).
 */
import fs from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { parse } from 'yaml';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.ts';
import { withDatabase } from '../../src/db/migrate.ts';
import {
  derivedServerPorts,
  dropTemporalDatabases,
  ensureTemporalServerTools,
  freeServerPorts,
  setupTemporalDatabases,
  TEMPORAL_DYNAMIC_CONFIG_FILE,
  TEMPORAL_HISTORY_SHARDS,
  TEMPORAL_PERSISTENCE,
  writeServerConfig,
  type TemporalDatabases,
} from '../../dev/devserver/temporal-server.ts';
import { uniq } from '../support/env.ts';

/** Highest `vX.Y` folder of a versioned schema dir: the version update-schema must reach. */
function latestVersion(dir: string): string {
  return fs
    .readdirSync(dir)
    .map((v) => v.replace(/^v/, ''))
    .sort((a, b) => {
      const [a1, a2] = a.split('.').map(Number);
      const [b1, b2] = b.split('.').map(Number);
      return a1! - b1! || a2! - b2!;
    })
    .at(-1)!;
}

async function query<T extends pg.QueryResultRow>(url: string, sql: string): Promise<T[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<T>(sql)).rows;
  } finally {
    await client.end();
  }
}

describe('Temporal server on Postgres: schema setup', () => {
  const suffix = uniq('tsetup')
    .replace(/[^a-z0-9_]/gi, '_')
    .toLowerCase();
  const databases: TemporalDatabases = {
    postgresUrl: inject('postgresUrl'),
    database: `onceflow_test_t_${suffix}`,
    visibilityDatabase: `onceflow_test_tv_${suffix}`,
  };
  afterAll(async () => {
    await dropTemporalDatabases(databases);
  });

  it('creates, versions and upgrades both databases; a second run is a no-op', async () => {
    const tools = await ensureTemporalServerTools({ toolsDir: loadConfig().toolsDir });
    const first = await setupTemporalDatabases({ ...tools, databases });
    const expected = [
      latestVersion(path.join(tools.schemaDir, 'temporal', 'versioned')),
      latestVersion(path.join(tools.schemaDir, 'visibility', 'versioned')),
    ];
    expect(first.map((r) => [r.database, r.created, r.versionBefore, r.versionAfter])).toEqual([
      [databases.database, true, undefined, expected[0]],
      [databases.visibilityDatabase, true, undefined, expected[1]],
    ]);
    const executions = await query<{ n: string }>(
      withDatabase(databases.postgresUrl, databases.database),
      `SELECT count(*) AS n FROM information_schema.tables WHERE table_name = 'executions'`,
    );
    expect(executions[0]!.n).toBe('1');

    const history = async () =>
      Promise.all(
        [databases.database, databases.visibilityDatabase].map((db) =>
          query(
            withDatabase(databases.postgresUrl, db),
            'SELECT * FROM schema_update_history ORDER BY 1, 2, 3',
          ),
        ),
      );
    const before = await history();
    const second = await setupTemporalDatabases({ ...tools, databases });
    expect(second.map((r) => [r.created, r.versionBefore, r.versionAfter])).toEqual([
      [false, expected[0], expected[0]],
      [false, expected[1], expected[1]],
    ]);
    expect(await history()).toEqual(before);
  });
});

describe('Temporal server on Postgres: config', () => {
  it('writes a loopback-only config with the documented shard count and dynamic config', async () => {
    const dir = path.join(inject('dataDir'), uniq('tconfig'));
    const ports = await freeServerPorts();
    const files = writeServerConfig({
      dir,
      ports,
      namespace: 'default',
      databases: {
        postgresUrl: 'postgres://temporal:s3cret@127.0.0.1:5432/whatever',
        database: 'temporal',
        visibilityDatabase: 'temporal_visibility',
      },
    });
    const config = parse(fs.readFileSync(files.configFile, 'utf8'));
    expect(config.persistence.numHistoryShards).toBe(TEMPORAL_HISTORY_SHARDS);
    expect(TEMPORAL_HISTORY_SHARDS).toBe(4);
    const stores = config.persistence.datastores;
    // pgx, and as many idle connections as open ones (docs/DEPLOYING.md): a pool that closes what it
    // cannot park opens a new Postgres backend for the next burst.
    expect(stores[config.persistence.defaultStore].sql).toMatchObject({
      pluginName: 'postgres12_pgx',
      databaseName: 'temporal',
      connectAddr: '127.0.0.1:5432',
      user: 'temporal',
      password: 's3cret',
      maxConns: 8,
      maxIdleConns: 8,
    });
    expect(stores[config.persistence.visibilityStore].sql).toMatchObject({
      pluginName: 'postgres12_pgx',
      databaseName: 'temporal_visibility',
      maxConns: 3,
      maxIdleConns: 3,
    });
    for (const pool of [TEMPORAL_PERSISTENCE.default, TEMPORAL_PERSISTENCE.visibility]) {
      expect(pool.maxIdleConns).toBe(pool.maxConns);
    }
    for (const name of ['frontend', 'history', 'matching', 'worker']) {
      expect(config.services[name].rpc.bindOnLocalHost).toBe(true);
    }
    expect(config.services.frontend.rpc.grpcPort).toBe(ports.frontend);
    expect(config.global.membership.broadcastAddress).toBe('127.0.0.1');
    // The password file is readable by its owner only.
    expect(fs.statSync(files.configFile).mode & 0o077).toBe(0);

    const dynamic = parse(fs.readFileSync(files.dynamicConfigFile, 'utf8'));
    expect(dynamic['system.enableActivityEagerExecution'][0].value).toBe(true);
    // The operator re-drive is a Workflow Update.
    expect(dynamic['frontend.enableUpdateWorkflowExecution'][0].value).toBe(true);
    // Worker Versioning (docs/UPGRADING.md): workers poll as Deployment Versions, runs are Pinned.
    expect(dynamic['system.enableDeploymentVersions'][0].value).toBe(true);
    expect(dynamic['frontend.workerVersioningWorkflowAPIs'][0].value).toBe(true);
    // One task queue partition for one worker deployment (docs/DEPLOYING.md).
    expect(dynamic['matching.numTaskqueueReadPartitions'][0].value).toBe(1);
    expect(dynamic['matching.numTaskqueueWritePartitions'][0].value).toBe(1);
    // The transfer queue loads new tasks without waiting for a 20/s token (docs/BENCHMARKS.md).
    expect(dynamic['history.transferProcessorMaxPollRPS'][0].value).toBe(1000);
    expect(config.dynamicConfigClient.filepath).toBe(files.dynamicConfigFile);
    // The same file compose mounts (test/deploy/compose.test.ts), byte for byte.
    expect(fs.readFileSync(files.dynamicConfigFile, 'utf8')).toBe(
      fs.readFileSync(TEMPORAL_DYNAMIC_CONFIG_FILE, 'utf8'),
    );

    const ui = parse(fs.readFileSync(path.join(files.uiConfigDir, 'onceflow.yaml'), 'utf8'));
    expect(ui).toMatchObject({
      temporalGrpcAddress: `127.0.0.1:${ports.frontend}`,
      host: '127.0.0.1',
      port: ports.ui,
    });

    // Same inputs, same files: rewriting on every start changes nothing.
    const text = fs.readFileSync(files.configFile, 'utf8');
    writeServerConfig({
      dir,
      ports,
      namespace: 'default',
      databases: {
        postgresUrl: 'postgres://temporal:s3cret@127.0.0.1:5432/whatever',
        database: 'temporal',
        visibilityDatabase: 'temporal_visibility',
      },
    });
    expect(fs.readFileSync(files.configFile, 'utf8')).toBe(text);
  });

  it('derives distinct server ports from TEMPORAL_PORT', () => {
    const ports = Object.values(derivedServerPorts(7233, 8233));
    expect(new Set(ports).size).toBe(ports.length);
    expect(derivedServerPorts(7233, 8233)).toMatchObject({
      frontend: 7233,
      history: 7234,
      frontendMembership: 6933,
    });
  });

  it('accepts TEMPORAL_BACKEND dev or postgres and refuses anything else', () => {
    expect(loadConfig({}).temporal.backend).toBe('dev');
    const pgConfig = loadConfig({
      TEMPORAL_BACKEND: 'postgres',
      DATABASE_URL: 'postgres://u@h:5/app',
    }).temporal;
    expect(pgConfig.backend).toBe('postgres');
    expect(pgConfig.postgres).toEqual({
      url: 'postgres://u@h:5/app',
      database: 'temporal',
      visibilityDatabase: 'temporal_visibility',
    });
    expect(() => loadConfig({ TEMPORAL_BACKEND: 'sqlite' })).toThrow(ConfigError);
    expect(() => loadConfig({ TEMPORAL_BACKEND: 'sqlite' })).toThrow(/TEMPORAL_BACKEND must be dev/);
  });
});
