/**
 * A TCP proxy on loopback whose link can be cut without closing anything: what
 * a network partition (a firewall dropping packets, a toxiproxy `timeout`
 * toxic) looks like to both ends. Connected sockets stay open and quiet; a new
 * connection is accepted, and its start-up bytes go nowhere. Neither end gets
 * an error or a FIN, so only its own timeouts can end its wait.
 *
 * While cut, bytes (and closes) are held, as TCP keeps retransmitting them, and
 * the heal delivers them in order: a COMMIT that was on the wire when the link
 * went down can still land after it came back. Bytes for an end that has gone
 * meanwhile are dropped (its kernel would answer them with a reset).
 * test/support/blackhole.ts is the other shape: a server that never answers.
 */
import net from 'node:net';

export interface TcpProxy {
  /** Where to connect instead of the target. */
  host: string;
  port: number;
  /** `url` (postgres://…) with its host and port replaced by the proxy's. */
  via(url: string): string;
  /** Stops forwarding in both directions, now. Sockets stay open. */
  blackhole(): void;
  /**
   * Cuts the link at the first chunk from a client that `match`es: `before` holds that chunk too,
   * `after` forwards it and holds everything after it (its answer included).
   */
  blackholeWhen(match: (chunk: Buffer) => boolean, when: 'before' | 'after'): void;
  /** Forwards again: what was held first, in order, then any close that happened meanwhile. */
  heal(): void;
  /** Whether the link is cut now. */
  isCut(): boolean;
  /** Connections accepted so far. */
  accepted(): number;
  close(): Promise<void>;
}

/** One direction of one connection. */
interface Pipe {
  to: net.Socket;
  held: Buffer[];
  /** `from` ended (FIN, reset or destroyed) while the link was cut: `to` is ended after `held`. */
  endHeld: boolean;
}

export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const sockets = new Set<net.Socket>();
  const pipes = new Set<Pipe>();
  let cut = false;
  let trigger: { match: (chunk: Buffer) => boolean; when: 'before' | 'after' } | undefined;
  let accepted = 0;

  const flush = (pipe: Pipe) => {
    const { to } = pipe;
    for (const chunk of pipe.held.splice(0)) if (!to.destroyed) to.write(chunk);
    if (pipe.endHeld && !to.destroyed) to.end();
  };

  /** Forwards `from` to `to`; `fromClient`: the direction a trigger looks at. */
  const pipe = (from: net.Socket, to: net.Socket, fromClient: boolean) => {
    const p: Pipe = { to, held: [], endHeld: false };
    pipes.add(p);
    // Nothing can be delivered to a closed end any more.
    to.on('close', () => pipes.delete(p));
    from.on('data', (chunk: Buffer) => {
      if (!cut && fromClient && trigger?.match(chunk)) {
        const { when } = trigger;
        trigger = undefined;
        if (when === 'after') to.write(chunk);
        cut = true;
        if (when === 'after') return;
      }
      if (cut) p.held.push(chunk);
      else if (!to.destroyed) to.write(chunk);
    });
    let ended = false;
    const onEnd = () => {
      if (ended) return;
      ended = true;
      if (cut) p.endHeld = true;
      else if (!to.destroyed) to.end();
    };
    from.on('end', onEnd);
    from.on('close', onEnd);
  };

  const server = net.createServer((client) => {
    accepted += 1;
    const upstream = net.connect(target.port, target.host);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => undefined);
      s.on('close', () => sockets.delete(s));
    }
    pipe(client, upstream, true);
    pipe(upstream, client, false);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as net.AddressInfo;
  const host = '127.0.0.1';
  return {
    host,
    port,
    via(url) {
      const u = new URL(url);
      u.hostname = host;
      u.port = String(port);
      return u.toString();
    },
    blackhole() {
      cut = true;
    },
    blackholeWhen(match, when) {
      trigger = { match, when };
    },
    heal() {
      cut = false;
      trigger = undefined;
      for (const p of pipes) flush(p);
    },
    isCut: () => cut,
    accepted: () => accepted,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
