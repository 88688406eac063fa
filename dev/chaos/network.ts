/**
 * The chaos stack's network: a toxiproxy server (dev/toxiproxy.ts) with one
 * proxy in front of Postgres and one in front of the Temporal frontend. The
 * API and the workers reach both through the proxies; the harness's own
 * connections (facts, invariants, the sandbox provider's store) go direct, so
 * a network fault never hides from the checks or skews them.
 *
 * Toxics used by the scenarios (toxiproxy 2.x semantics):
 * - `timeout` with timeout=0 on both streams: a blackhole. Connections stay
 *   open (new ones are accepted by the proxy too) and nothing passes either
 *   way; when the toxic is removed, toxiproxy closes the connections it held,
 *   so the processes must notice and connect again.
 * - `latency` {latency, jitter}: every chunk delayed, in order.
 * - `reset_peer` {timeout: 0}: a connection that sends anything is reset (RST).
 */
import { ToxiproxyServer, type Toxic } from '../toxiproxy.ts';

export type ProxyName = 'postgres' | 'temporal';

export class ChaosNetwork {
  /** host:port each proxy listens on, fixed once chosen (a restarted server binds the same ports). */
  private readonly listen = new Map<ProxyName, string>();
  private unexpected: string[] = [];

  private constructor(
    readonly server: ToxiproxyServer,
    private readonly upstreams: Readonly<Record<ProxyName, string>>,
  ) {
    server.proc.on('exit', (exit) => {
      if (!exit.expected) this.unexpected.push(exit.how);
    });
  }

  /** Starts the server and creates both proxies; `upstreams` are the real host:port of each. */
  static async start(opts: {
    binary: string;
    logFile: string;
    seed: number;
    upstreams: Record<ProxyName, string>;
  }): Promise<ChaosNetwork> {
    const server = await ToxiproxyServer.start(opts.binary, opts.logFile, opts.seed);
    const network = new ChaosNetwork(server, opts.upstreams);
    try {
      await network.createProxies();
    } catch (err) {
      await server.proc.stop();
      throw err;
    }
    return network;
  }

  private async createProxies(): Promise<void> {
    for (const [name, upstream] of Object.entries(this.upstreams) as [ProxyName, string][]) {
      const proxy = await this.server.client.createProxy({
        name,
        listen: this.listen.get(name) ?? '127.0.0.1:0',
        upstream,
      });
      this.listen.set(name, proxy.listen);
    }
  }

  /** The host:port a process uses to reach `name` through its proxy. */
  address(name: ProxyName): string {
    const listen = this.listen.get(name);
    if (!listen) throw new Error(`no ${name} proxy`);
    return listen;
  }

  get alive(): boolean {
    return this.server.proc.alive;
  }

  /** Before a scenario: the server up with both proxies, and no toxic left from an earlier one. */
  async heal(): Promise<void> {
    if (!this.alive) {
      await this.server.proc.start();
      await this.createProxies();
    } else {
      await this.server.client.reset();
    }
  }

  addToxic(proxy: ProxyName, toxic: Toxic): Promise<void> {
    return this.server.client.addToxic(proxy, toxic);
  }

  removeToxic(proxy: ProxyName, toxic: string): Promise<void> {
    return this.server.client.removeToxic(proxy, toxic);
  }

  /** Exits of the server nobody asked for, since the last call. */
  takeUnexpectedExits(): string[] {
    const out = this.unexpected;
    this.unexpected = [];
    return out;
  }

  async stop(): Promise<void> {
    await this.server.proc.stop();
  }

  killNow(): void {
    this.server.proc.killNow();
  }
}

/** The toxics of a blackhole on `proxy`: nothing passes in either direction. */
export function blackholeToxics(prefix: string): Toxic[] {
  return (['upstream', 'downstream'] as const).map((stream) => ({
    name: `${prefix}-${stream}`,
    type: 'timeout',
    stream,
    attributes: { timeout: 0 },
  }));
}
