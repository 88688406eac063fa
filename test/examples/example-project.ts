/**
 * An example as its user gets it: `npm pack` of packages/onceflow (dist/
 * with declarations, as its prepack builds it), the tarball installed into a
 * temporary copy of examples/<name>, which is then type-checked and built
 * against the published declarations alone. Each test file packs once.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, '../..');

/** This process's environment without npm's per-script variables, so a nested npm sees only its own project. */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!/^npm_/i.test(k)) env[k] = v;
  return { ...env, ...extra };
}

/** Runs a command to completion, killed after `timeoutMs`; rejects on a non-zero exit (with its output). */
export function sh(
  cmd: string,
  args: string[],
  cwd: string,
  opts: { env?: Record<string, string>; timeoutMs?: number } = {},
): Promise<{ stdout: string; stderr: string }> {
  return run(cmd, args, {
    cwd,
    env: cleanEnv(opts.env),
    maxBuffer: 32 * 1024 * 1024,
    timeout: opts.timeoutMs ?? 180_000,
    killSignal: 'SIGKILL',
  });
}

/**
 * Packs packages/onceflow into `work` and returns the tarball's path. Its dist/ is the one the
 * global setup built with the package's own build script (what its prepack runs), so this packs
 * without scripts: nothing rebuilds the folder under the other files that read it.
 */
export async function packOnceflow(work: string): Promise<string> {
  const pkg = path.join(root, 'packages/onceflow');
  if (!fs.existsSync(path.join(pkg, 'dist/index.d.ts')))
    throw new Error(`${pkg}/dist is not built: the integration tier's global setup builds it`);
  const { stdout } = await sh(
    'npm',
    ['pack', '--ignore-scripts', '--silent', '--pack-destination', work],
    pkg,
  );
  const name = stdout.trim().split('\n').pop() ?? '';
  const tarball = path.join(work, name);
  if (!name.endsWith('.tgz') || !fs.existsSync(tarball))
    throw new Error(`npm pack printed no tarball: ${stdout}`);
  return tarball;
}

/**
 * Copies examples/<name> into `work`, points its `onceflow` dependency at the
 * tarball, installs it from npm's cache where it can, and builds it (tsc,
 * which type-checks as it emits and fails on a type error). Returns the copy's directory.
 */
export async function installExample(name: string, work: string, tarball: string): Promise<string> {
  const project = path.join(work, name);
  fs.cpSync(path.join(root, 'examples', name), project, {
    recursive: true,
    filter: (src) => !/[/\\](node_modules|dist)$/.test(src),
  });
  const manifestPath = path.join(project, 'package.json');
  const manifest = JSON.parse(fs.readFileSync(manifestPath, 'utf8')) as {
    dependencies: Record<string, string>;
  };
  manifest.dependencies.onceflow = `file:${tarball}`;
  fs.writeFileSync(manifestPath, JSON.stringify(manifest, null, 2));
  await sh('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'], project, {
    timeoutMs: 300_000,
  });
  await sh('npx', ['tsc'], project);
  return project;
}

/** The example's sources (src/) that its build emitted no JavaScript for: none, once installExample built it. */
export function unbuiltSources(project: string): string[] {
  return fs
    .readdirSync(path.join(project, 'src'), { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))
    .filter((f) => !fs.existsSync(path.join(project, 'dist', f.replace(/\.ts$/, '.js'))));
}

/** A child process of the test (an example's worker), with its output kept for assertions and failures. */
export interface Child {
  proc: ChildProcess;
  output(): string;
  /** Resolves with the first output line matching `pattern`; rejects after `timeoutMs` or if the process exits first. */
  line(pattern: RegExp, timeoutMs: number): Promise<string>;
  /** Resolves with the exit code (or signal) once it exits; rejects after `timeoutMs`. */
  exited(timeoutMs: number): Promise<number | NodeJS.Signals>;
}

export function spawnNode(script: string, cwd: string, env: Record<string, string>): Child {
  const proc = spawn(process.execPath, [script], {
    cwd,
    env: cleanEnv(env),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let text = '';
  const waiters = new Set<() => void>();
  const onData = (chunk: Buffer) => {
    text += chunk.toString('utf8');
    for (const wake of waiters) wake();
  };
  proc.stdout.on('data', onData);
  proc.stderr.on('data', onData);
  let closed = false;
  // 'close', not 'exit': by then its output has been read to the end.
  const exit = new Promise<number | NodeJS.Signals>((resolve) =>
    proc.once('close', (code, signal) => {
      closed = true;
      for (const wake of waiters) wake();
      resolve(signal ?? code ?? -1);
    }),
  );
  const describe = () => `${script} (pid ${proc.pid}); its output:\n${text}`;

  return {
    proc,
    output: () => text,
    line(pattern, timeoutMs) {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () => done(new Error(`no line matching ${pattern} within ${timeoutMs} ms from ${describe()}`)),
          timeoutMs,
        );
        const check = () => {
          const match = text.split('\n').find((l) => pattern.test(l));
          if (match !== undefined) done(undefined, match);
          else if (closed) done(new Error(`exited before a line matching ${pattern}: ${describe()}`));
        };
        function done(err: Error | undefined, value?: string) {
          clearTimeout(timer);
          waiters.delete(check);
          if (err) reject(err);
          else resolve(value!);
        }
        waiters.add(check);
        check();
      });
    },
    exited: (timeoutMs) => within(exit, timeoutMs, `exit of ${script} (pid ${proc.pid})`),
  };
}

/** `promise`, or a rejection naming `what` after `ms`: every wait in these tests is bounded. */
export function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
