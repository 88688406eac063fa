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
export function isListening(port: number, host = '127.0.0.1', timeoutMs = 500): Promise<boolean> {
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

/** Throws PortInUseError unless we can bind the port ourselves right now. */
export async function assertPortFree(port: number, what: string, host = '127.0.0.1'): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const server = net.createServer();
    server.once('error', (err: NodeJS.ErrnoException) =>
      reject(err.code === 'EADDRINUSE' || err.code === 'EACCES' ? new PortInUseError(port, what) : err),
    );
    server.listen({ port, host, exclusive: true }, () => server.close(() => resolve()));
  });
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
