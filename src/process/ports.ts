/**
 * Port checks every onceflow process makes before it listens: a clash is a
 * PortInUseError naming the port and its env var, not a bare EADDRINUSE.
 * Product code (the API, the metrics listeners) uses it, so it lives in src/,
 * not with the dev tools that also call it.
 */
import net from 'node:net';

export class PortInUseError extends Error {
  override name = 'PortInUseError';
  constructor(
    readonly port: number,
    readonly what: string,
  ) {
    super(
      `Port ${port} (${what}) is already in use. Is another onceflow stack running? ` +
        `Stop it, or choose another port with the matching *_PORT environment variable.`,
    );
  }
}

/** Resolves true if something accepts TCP connections on host:port. */
function isListening(port: number, host = '127.0.0.1', timeoutMs = 500): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host });
    const done = (v: boolean) => {
      socket.destroy();
      resolve(v);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

/**
 * True if this process can bind host:port right now (the port is released at once), false if
 * it is taken or not ours to bind; any other error (an address not on this host) rejects.
 */
function canBind(port: number, host: string): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', (err: NodeJS.ErrnoException) =>
      err.code === 'EADDRINUSE' || err.code === 'EACCES' ? resolve(false) : reject(err),
    );
    server.listen({ port, host, exclusive: true }, () => server.close(() => resolve(true)));
  });
}

/** Throws PortInUseError unless we can bind the port ourselves right now. */
export async function assertPortFree(port: number, what: string, host = '127.0.0.1'): Promise<void> {
  if (!(await canBind(port, host))) throw new PortInUseError(port, what);
  // A server bound to another address (e.g. 0.0.0.0 vs 127.0.0.1) may still answer.
  if (await isListening(port, host)) throw new PortInUseError(port, what);
}

/**
 * Ports freePort has handed out in this process. The OS only says a port is
 * free now, and nothing holds it until the caller binds it, so two calls in a
 * row can get the same port back: a test stack then asks for one port twice
 * (seen in CI: the sandbox's port came back as the worker's SDK metrics port).
 */
const handedOut = new Set<number>();

function osFreePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen({ port: 0, host }, () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/**
 * Asks the OS for a free port (for tests and the dev harness, which must not
 * collide with a running stack), never one this process was given before.
 */
export async function freePort(host = '127.0.0.1'): Promise<number> {
  for (let tries = 0; ; tries++) {
    const port = await osFreePort(host);
    if (!handedOut.has(port) || tries >= 100) {
      handedOut.add(port);
      return port;
    }
  }
}

/**
 * The first of `count` consecutive free ports, for a process that derives its
 * other ports from the first (`npm start -- --workers N` puts worker i's
 * metrics ports at base + 2i). The base is drawn from 20000-32767, below the
 * kernels' ephemeral ranges (Linux 32768-60999, macOS and Windows from
 * 49152): freePort's OS-assigned ports come from those ranges, and so does
 * every outgoing connection's local port, which can take a neighbour of an
 * ephemeral port between this check and the bind (seen in CI).
 */
export async function freePortRange(count: number, host = '127.0.0.1'): Promise<number> {
  const low = 20_000;
  const high = 32_767 - (count - 1);
  for (let tries = 0; tries < 200; tries++) {
    const base = low + Math.floor(Math.random() * (high - low + 1));
    const ports = Array.from({ length: count }, (_, i) => base + i);
    if (ports.some((p) => handedOut.has(p))) continue;
    let free = true;
    for (const p of ports) if (!(free = await canBind(p, host))) break;
    if (!free) continue;
    for (const p of ports) handedOut.add(p);
    return base;
  }
  throw new Error(`found no ${count} consecutive free ports on ${host} in 20000-32767`);
}
