/** onceflow's real entry points as child processes, for tests that kill, fault and restart them. */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { inject } from 'vitest';
import { waitForHttp } from '../../dev/wait.ts';
import { until } from './wait.ts';

const root = path.resolve(import.meta.dirname, '../..');

export interface Proc {
  name: string;
  child: ChildProcess;
  output: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  alive: () => boolean;
}

/**
 * Node's arguments that run `entry` (a path from the repo root): an entry point of the app
 * (`src/…`) from the run's compiled build, as the image runs it (test/setup/global.ts builds it
 * once; tsx would cost each child twice the CPU), anything else (dev/, test fixtures) through tsx.
 */
export function entryArgv(entry: string): string[] {
  if (entry.startsWith('src/')) return [path.join(inject('appBuild'), entry.replace(/\.ts$/, '.js'))];
  return ['--import', 'tsx', path.join(root, entry)];
}

/** `node <entry> [args]` (see entryArgv) with only PATH/HOME from this process plus `env`. */
export function spawnEntry(
  name: string,
  entry: string,
  env: Record<string, string>,
  args: string[] = [],
): Proc {
  return spawnNode(name, [...entryArgv(entry), ...args], env);
}

/** `node <argv>` (e.g. a compiled file of dist/app, no tsx) with only PATH/HOME from this process plus `env`. */
export function spawnNode(name: string, argv: string[], env: Record<string, string>): Proc {
  const child = spawn(process.execPath, argv, {
    cwd: root,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  return {
    name,
    child,
    output: () => out,
    exited,
    alive: () => child.exitCode === null && child.signalCode === null,
  };
}

/** Polls `url` until it answers (below 500); fails early if `proc` exits. Either error carries its output. */
export async function waitHttpOk(url: string, proc: Proc, timeoutMs = 90_000): Promise<void> {
  await waitForHttp(url, timeoutMs, {
    intervalMs: 100,
    abandon: () => (proc.alive() ? undefined : `${proc.name} exited during startup`),
  }).catch((err: unknown) => {
    if (err instanceof Error) err.message += `\n${proc.name} output:\n${proc.output()}`;
    throw err;
  });
}

export function killAll(procs: Proc[]): void {
  for (const p of procs) if (p.alive()) p.child.kill('SIGKILL');
}

/** Resolves once `proc`'s output matches `pattern`; fails early (with its output) if it exits. */
export async function waitOutput(proc: Proc, pattern: RegExp, timeoutMs = 90_000): Promise<RegExpMatchArray> {
  return withOutputOnTimeout(
    proc,
    until(
      `${proc.name} to print ${pattern}`,
      () => {
        const match = proc.output().match(pattern);
        if (!match && !proc.alive()) {
          throw new Error(`${proc.name} exited before printing ${pattern}:\n${proc.output()}`);
        }
        return match;
      },
      { timeoutMs, intervalMs: 100 },
    ),
  );
}

/** A wait's timeout error gets the process's output, which usually says why. */
async function withOutputOnTimeout<T>(proc: Proc, wait: Promise<T>): Promise<T> {
  try {
    return await wait;
  } catch (err) {
    if (err instanceof Error && err.message.startsWith('timed out')) {
      err.message += `\n${proc.name} output:\n${proc.output()}`;
    }
    throw err;
  }
}

/** The latest pid `npm start` (dev/start.ts) reported for each child it started, by name. */
export function reportedChildPids(proc: Proc): Map<string, number> {
  const pids = new Map<string, number>();
  for (const m of proc.output().matchAll(/\[onceflow\] ([\w-]+) started \(pid (\d+)\)/g))
    pids.set(m[1]!, Number(m[2]));
  return pids;
}

export function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
