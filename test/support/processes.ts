/** onceflow's real entry points as child processes, for tests that kill, fault and restart them. */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';

const root = path.resolve(import.meta.dirname, '../..');

export interface Proc {
  name: string;
  child: ChildProcess;
  output: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  alive: () => boolean;
}

/** `node --import tsx <entry> [args]` with only PATH/HOME from this process plus `env`. */
export function spawnEntry(
  name: string,
  entry: string,
  env: Record<string, string>,
  args: string[] = [],
): Proc {
  const child = spawn(process.execPath, ['--import', 'tsx', path.join(root, entry), ...args], {
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

/** Polls `url` until it answers 2xx; fails early (with its output) if `proc` exits. */
export async function waitHttpOk(url: string, proc: Proc, timeoutMs = 90_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!proc.alive()) throw new Error(`${proc.name} exited during startup:\n${proc.output()}`);
    try {
      if ((await fetch(url)).ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${proc.name} did not answer ${url}:\n${proc.output()}`);
}

export function killAll(procs: Proc[]): void {
  for (const p of procs) if (p.alive()) p.child.kill('SIGKILL');
}

/** Resolves once `proc`'s output matches `pattern`; fails early (with its output) if it exits. */
export async function waitOutput(proc: Proc, pattern: RegExp, timeoutMs = 90_000): Promise<RegExpMatchArray> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const match = proc.output().match(pattern);
    if (match) return match;
    if (!proc.alive()) throw new Error(`${proc.name} exited before printing ${pattern}:\n${proc.output()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${proc.name} did not print ${pattern}:\n${proc.output()}`);
}
