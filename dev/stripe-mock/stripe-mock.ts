/**
 * stripe-mock (github.com/stripe/stripe-mock): Stripe's own mock server, which
 * validates every request against Stripe's OpenAPI description and answers
 * with fixtures. Found at `<toolsDir>/bin/stripe-mock` (or STRIPE_MOCK_PATH),
 * else built from its Go module into that folder, pinned, the way the
 * Temporal CLI is (dev/devserver/temporal.ts).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { freePort } from '../../src/process/ports.ts';
import { goInstallWithProgress, isExecutable, which } from '../devserver/temporal.ts';

const STRIPE_MOCK_MODULE = 'github.com/stripe/stripe-mock';
const STRIPE_MOCK_VERSION = 'v0.203.0';

export async function ensureStripeMock(opts: {
  toolsDir: string;
  env?: NodeJS.ProcessEnv;
  log?: (line: string) => void;
}): Promise<string> {
  const env = opts.env ?? process.env;
  const log = opts.log ?? ((l: string) => console.error(l));
  if (env.STRIPE_MOCK_PATH) {
    if (!isExecutable(env.STRIPE_MOCK_PATH))
      throw new Error(`STRIPE_MOCK_PATH=${env.STRIPE_MOCK_PATH} is not executable`);
    return env.STRIPE_MOCK_PATH;
  }
  const binDir = path.join(opts.toolsDir, 'bin');
  const target = path.join(binDir, 'stripe-mock');
  if (isExecutable(target)) return target;
  const go = which('go', env);
  if (!go) {
    throw new Error(
      `stripe-mock is not built and there is no Go toolchain to build ${STRIPE_MOCK_MODULE}@${STRIPE_MOCK_VERSION}: ` +
        'install Go (https://go.dev/doc/install), or set STRIPE_MOCK_PATH to a stripe-mock binary',
    );
  }
  fs.mkdirSync(binDir, { recursive: true });
  log(
    `[stripe-mock] Building ${STRIPE_MOCK_MODULE}@${STRIPE_MOCK_VERSION} into ${binDir} (first run only)...`,
  );
  await goInstallWithProgress({
    go,
    packages: [STRIPE_MOCK_MODULE],
    version: STRIPE_MOCK_VERSION,
    binDir,
    rename: { 'stripe-mock': 'stripe-mock' },
    env,
    log,
    label: 'stripe-mock',
  });
  if (!isExecutable(target)) throw new Error(`go install finished but ${target} is missing`);
  return target;
}

export interface RunningStripeMock {
  url: string;
  stop(): Promise<void>;
}

/** Starts stripe-mock on a free loopback port and waits until it answers. */
export async function startStripeMock(
  binary: string,
  opts: { readyTimeoutMs?: number } = {},
): Promise<RunningStripeMock> {
  const port = await freePort();
  const child: ChildProcess = spawn(binary, ['-http-addr', `127.0.0.1:${port}`], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr?.on('data', (c: Buffer) => {
    stderr = (stderr + c.toString()).slice(-4000);
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + (opts.readyTimeoutMs ?? 20_000);
  for (;;) {
    if (child.exitCode !== null) throw new Error(`stripe-mock exited (${child.exitCode}): ${stderr}`);
    try {
      // Any HTTP answer (401 without a key) means it is up.
      await fetch(`${url}/v1/balance`, { signal: AbortSignal.timeout(1_000) });
      break;
    } catch {
      if (Date.now() > deadline) {
        child.kill('SIGKILL');
        throw new Error(`stripe-mock did not answer on ${url}: ${stderr}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  return {
    url,
    async stop() {
      if (child.exitCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
}
