/**
 * Toxiproxy (github.com/Shopify/toxiproxy): a TCP proxy whose connections can
 * be degraded on demand (blackholed, slowed, reset) through an HTTP API. The
 * chaos harness puts one between the onceflow processes and Postgres, and one
 * between them and Temporal (dev/chaos/stack.ts), to inject network faults.
 *
 * The server is found at TOXIPROXY_SERVER_PATH, else `<toolsDir>/bin/toxiproxy-server`,
 * else built from its Go module into that folder, pinned, the way the
 * Temporal CLI is (dev/devserver/temporal.ts): nothing is downloaded at run time.
 * The HTTP API is four calls, spoken here with fetch (no client package).
 */
import fs from 'node:fs';
import path from 'node:path';
import { freePort } from '../src/process/ports.ts';
import { Supervisor } from '../src/process/supervisor.ts';
import { goInstallWithProgress, isExecutable, which } from './devserver/temporal.ts';
import { pollUntil } from './wait.ts';

const TOXIPROXY_MODULE = 'github.com/Shopify/toxiproxy/v2/cmd/server';
const TOXIPROXY_VERSION = 'v2.5.0';

type Log = (line: string) => void;

class ToxiproxyError extends Error {
  override name = 'ToxiproxyError';
}

/** Finds the toxiproxy server, or builds it from its Go module on first use (a minute or two). */
export async function ensureToxiproxy(opts: {
  toolsDir: string;
  env?: NodeJS.ProcessEnv;
  log?: Log;
}): Promise<string> {
  const env = opts.env ?? process.env;
  const log = opts.log ?? ((l: string) => console.error(l));
  const explicit = env.TOXIPROXY_SERVER_PATH;
  if (explicit) {
    if (!isExecutable(explicit))
      throw new ToxiproxyError(`TOXIPROXY_SERVER_PATH=${explicit} is not an executable file.`);
    return explicit;
  }
  const binDir = path.resolve(opts.toolsDir, 'bin'); // go install wants an absolute GOBIN
  const target = path.join(binDir, 'toxiproxy-server');
  if (isExecutable(target)) return target;
  const go = which('go', env);
  if (!go) {
    throw new ToxiproxyError(
      'No toxiproxy server found and no Go toolchain to build one (the chaos harness injects its network faults with it).\n' +
        `  Either install Go (https://go.dev/doc/install) and re-run, so the project can build ${TOXIPROXY_MODULE}@${TOXIPROXY_VERSION},\n` +
        '  or set TOXIPROXY_SERVER_PATH=/path/to/toxiproxy-server (a 2.x release).',
    );
  }
  fs.mkdirSync(binDir, { recursive: true });
  log(
    `[toxiproxy] Building ${TOXIPROXY_MODULE}@${TOXIPROXY_VERSION} into ${binDir} (first run only; a minute or two)...`,
  );
  await goInstallWithProgress({
    go,
    packages: [TOXIPROXY_MODULE],
    version: TOXIPROXY_VERSION,
    binDir,
    rename: { server: 'toxiproxy-server' },
    env,
    log,
    label: 'toxiproxy',
  });
  if (!isExecutable(target)) throw new ToxiproxyError(`go install finished but ${target} is missing.`);
  log(`[toxiproxy] Built ${target}`);
  return target;
}

/** A toxic's direction: `upstream` is client to server, `downstream` server to client. */
type ToxicStream = 'upstream' | 'downstream';

export interface Toxic {
  name: string;
  /** `timeout`, `latency`, `reset_peer`, `bandwidth`, `slow_close`, `slicer`, `limit_data`. */
  type: string;
  stream: ToxicStream;
  /** The share of connections it applies to (default 1: all). */
  toxicity?: number;
  /** Per type: timeout {timeout}, latency {latency, jitter}, reset_peer {timeout}, all in ms. */
  attributes: Record<string, number>;
}

export interface Proxy {
  name: string;
  /** host:port it listens on (the port the server chose when asked for port 0). */
  listen: string;
  upstream: string;
}

/** The server's HTTP API: create proxies, add and remove toxics, reset. */
export class ToxiproxyClient {
  constructor(readonly url: string) {}

  private async call(method: string, route: string, body?: unknown): Promise<unknown> {
    const res = await fetch(`${this.url}${route}`, {
      method,
      ...(body === undefined
        ? {}
        : { headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(5_000),
    });
    const text = await res.text();
    if (!res.ok) throw new ToxiproxyError(`toxiproxy ${method} ${route}: HTTP ${res.status} ${text.trim()}`);
    return text ? (JSON.parse(text) as unknown) : undefined;
  }

  async version(): Promise<string> {
    const res = await fetch(`${this.url}/version`, { signal: AbortSignal.timeout(2_000) });
    if (!res.ok) throw new ToxiproxyError(`toxiproxy GET /version: HTTP ${res.status}`);
    return (await res.text()).trim();
  }

  /** `listen` may name port 0: the answer says which port the server bound. */
  async createProxy(p: Proxy): Promise<Proxy> {
    return (await this.call('POST', '/proxies', { ...p, enabled: true })) as Proxy;
  }

  async addToxic(proxy: string, toxic: Toxic): Promise<void> {
    await this.call('POST', `/proxies/${encodeURIComponent(proxy)}/toxics`, { toxicity: 1, ...toxic });
  }

  async removeToxic(proxy: string, toxic: string): Promise<void> {
    await this.call('DELETE', `/proxies/${encodeURIComponent(proxy)}/toxics/${encodeURIComponent(toxic)}`);
  }

  /** Every proxy enabled again and every toxic removed. */
  async reset(): Promise<void> {
    await this.call('POST', '/reset');
  }
}

/** A toxiproxy server on a free loopback port: its API, its process. */
export class ToxiproxyServer {
  readonly proc: Supervisor;
  readonly client: ToxiproxyClient;

  private constructor(
    binary: string,
    readonly port: number,
    logFile: string,
    seed: number,
  ) {
    this.client = new ToxiproxyClient(`http://127.0.0.1:${port}`);
    this.proc = new Supervisor({
      name: 'toxiproxy',
      command: binary,
      // The seed of its randomness (latency jitter, toxicity): the same run, the same jitter.
      args: ['-host', '127.0.0.1', '-port', String(port), '-seed', String(seed)],
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', LOG_LEVEL: 'warn' },
      logFile,
      // Its proxies live in its memory: whoever runs it re-creates them after a restart.
      restart: false,
      stopGraceMs: 5_000,
      ready: (sup) =>
        pollUntil(`toxiproxy on ${this.client.url}`, async () => !!(await this.client.version()), {
          timeoutMs: 20_000,
          abandon: () => (sup.alive ? undefined : `it exited during startup; see ${logFile}`),
        }),
    });
  }

  static async start(binary: string, logFile: string, seed = 1): Promise<ToxiproxyServer> {
    const server = new ToxiproxyServer(binary, await freePort(), logFile, seed);
    await server.proc.start();
    return server;
  }
}
