/**
 * A counting TCP relay in front of Postgres, for bench:e2e --latency: it
 * passes every byte through unchanged and reads the wire protocol on the way
 * (https://www.postgresql.org/docs/15/protocol-message-formats.html) to count
 * round trips, i.e. what a client waits for: one per simple `Query` ('Q') and
 * one per extended-protocol `Sync` ('S', which node-postgres sends once per
 * query), each by the statement's text. The server's `ReadyForQuery` ('Z')
 * answers are counted too, as a check (one per round trip, plus one per new
 * connection), and `NotificationResponse` ('A': a LISTEN's wake-up, pushed,
 * not a round trip).
 *
 * A pipelined statement (sent before the previous one's answer) is counted
 * like any other, though it adds no wait of its own.
 *
 * It stands in for pg_stat_statements, which needs `shared_preload_libraries`
 * and so a restart of the shared Postgres server. Bench-only; a connection
 * that negotiates TLS is relayed but not counted.
 */
import net from 'node:net';

/** Round trips and other counts since the relay started; `byStatement` keys are normalized statement texts. */
export interface WireCounts {
  roundTrips: number;
  readyForQuery: number;
  notifications: number;
  connections: number;
  byStatement: Record<string, number>;
}

/** A statement's text without its literals and whitespace runs, cut at 120 characters. */
function normalizeStatement(sql: string): string {
  const s = sql
    .replace(/--[^\n]*/g, ' ')
    .replace(/'(?:[^']|'')*'/g, "'?'")
    .replace(/\b\d+(?:\.\d+)?\b/g, '?')
    .replace(/\s+/g, ' ')
    .trim();
  return s.length > 120 ? `${s.slice(0, 117)}...` : s;
}

const SSL_REQUEST = 80877103;
const GSSENC_REQUEST = 80877104;

export class PgWireCounter {
  readonly counts: WireCounts = {
    roundTrips: 0,
    readyForQuery: 0,
    notifications: 0,
    connections: 0,
    byStatement: {},
  };
  readonly #sockets = new Set<net.Socket>();

  private constructor(
    private readonly server: net.Server,
    readonly port: number,
  ) {}

  /** Listens on a free loopback port and relays every connection to `upstream` (host:port). */
  static async start(upstream: string): Promise<PgWireCounter> {
    const [host, portText] = upstream.split(':') as [string, string];
    const server = net.createServer();
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    const counter = new PgWireCounter(server, (server.address() as net.AddressInfo).port);
    server.on('connection', (client) => counter.relay(client, host, Number(portText)));
    return counter;
  }

  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  /** A copy of the counts now (subtract two with `diffCounts`). */
  snapshot(): WireCounts {
    return { ...this.counts, byStatement: { ...this.counts.byStatement } };
  }

  async stop(): Promise<void> {
    for (const s of this.#sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private relay(client: net.Socket, host: string, port: number): void {
    const server = net.connect({ host, port });
    client.setNoDelay(true);
    server.setNoDelay(true);
    this.#sockets.add(client).add(server);
    this.counts.connections++;
    const c = this.counts;
    /** Named prepared statements of this connection: a Bind of one sends no text. */
    const named = new Map<string, string>();
    let pendingText: string | undefined;
    let startup = true;
    /** Single-byte answers the server owes to SSLRequest/GSSENCRequest, before its messages. */
    let owedSingleBytes = 0;
    let opaque = false; // TLS or GSS: stop reading
    let fromClient: Buffer = Buffer.alloc(0);
    let fromServer: Buffer = Buffer.alloc(0);
    const count = (text: string | undefined) => {
      c.roundTrips++;
      const key = text === undefined ? '(unknown)' : normalizeStatement(text);
      c.byStatement[key] = (c.byStatement[key] ?? 0) + 1;
    };
    const cstring = (buf: Buffer, at: number): [string, number] => {
      const end = buf.indexOf(0, at);
      return [buf.toString('utf8', at, end), end + 1];
    };
    const readClient = (chunk: Buffer) => {
      if (opaque) return;
      fromClient = fromClient.length ? Buffer.concat([fromClient, chunk]) : chunk;
      for (;;) {
        if (startup) {
          if (fromClient.length < 8) return;
          const len = fromClient.readInt32BE(0);
          if (fromClient.length < len) return;
          const code = fromClient.readInt32BE(4);
          if (code === SSL_REQUEST || code === GSSENC_REQUEST) owedSingleBytes++;
          else startup = false;
          fromClient = fromClient.subarray(len);
          continue;
        }
        if (fromClient.length < 5) return;
        const type = String.fromCharCode(fromClient[0]!);
        const len = fromClient.readInt32BE(1);
        if (fromClient.length < 1 + len) return;
        const body = fromClient.subarray(5, 1 + len);
        if (type === 'Q') {
          count(cstring(body, 0)[0]);
        } else if (type === 'P') {
          const [name, next] = cstring(body, 0);
          const [text] = cstring(body, next);
          if (name) named.set(name, text);
          pendingText = text;
        } else if (type === 'B') {
          const [, next] = cstring(body, 0); // portal
          const [statement] = cstring(body, next);
          if (statement) pendingText = named.get(statement) ?? pendingText;
        } else if (type === 'S') {
          count(pendingText);
          pendingText = undefined;
        }
        fromClient = fromClient.subarray(1 + len);
      }
    };
    const readServer = (chunk: Buffer) => {
      if (opaque) return;
      fromServer = fromServer.length ? Buffer.concat([fromServer, chunk]) : chunk;
      while (owedSingleBytes > 0 && fromServer.length > 0) {
        owedSingleBytes--;
        if (fromServer[0] === 0x53 /* 'S': TLS or GSS accepted */ || fromServer[0] === 0x47) {
          opaque = true;
          return;
        }
        fromServer = fromServer.subarray(1);
      }
      for (;;) {
        if (fromServer.length < 5) return;
        const type = fromServer[0];
        const len = fromServer.readInt32BE(1);
        if (fromServer.length < 1 + len) return;
        if (type === 0x5a /* Z */) c.readyForQuery++;
        else if (type === 0x41 /* A */) c.notifications++;
        fromServer = fromServer.subarray(1 + len);
      }
    };
    client.on('data', (chunk: Buffer) => {
      readClient(chunk);
      server.write(chunk);
    });
    server.on('data', (chunk: Buffer) => {
      readServer(chunk);
      client.write(chunk);
    });
    const close = () => {
      client.destroy();
      server.destroy();
      this.#sockets.delete(client);
      this.#sockets.delete(server);
    };
    client.on('close', close).on('error', close);
    server.on('close', close).on('error', close);
  }
}

/** `later - earlier`, statement by statement (only those that moved). */
export function diffCounts(later: WireCounts, earlier: WireCounts): WireCounts {
  const byStatement: Record<string, number> = {};
  for (const [k, v] of Object.entries(later.byStatement)) {
    const d = v - (earlier.byStatement[k] ?? 0);
    if (d) byStatement[k] = d;
  }
  return {
    roundTrips: later.roundTrips - earlier.roundTrips,
    readyForQuery: later.readyForQuery - earlier.readyForQuery,
    notifications: later.notifications - earlier.notifications,
    connections: later.connections - earlier.connections,
    byStatement,
  };
}
