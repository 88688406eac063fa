/**
 * A small bank on loopback, standing in for a real one. It posts one entry (a
 * withdrawal, a deposit or a refund) per idempotency key, remembers a refusal
 * under its key as well, and looks entries up by key, which is what a
 * reconcile asks. Nothing else dedupes: two keys for one transfer are two
 * entries, as at a real bank.
 *
 *   POST /entries  Idempotency-Key: <key>  {kind, account, amount, refundOf?}
 *     200 the posted entry, 422 the refused entry, 409 the key was used for
 *     another request, 400 a malformed request (nothing posted)
 *   GET /entries?idempotency_key=<key>   200 the entry, 404 never seen
 *
 * Faults, for tests and demos: `loseResponse(kind)` posts the next entry of
 * that kind and then drops the connection before answering; `hold(kind)`
 * keeps the next new entry of that kind waiting until released, then posts
 * it and answers whoever is still listening.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export type EntryKind = 'withdrawal' | 'deposit' | 'refund';

/** One entry the bank posted or refused. A type, not an interface: a step's stored result is plain JSON. */
export type Entry = {
  id: string;
  idempotencyKey: string;
  kind: EntryKind;
  account: string;
  amount: number;
  status: 'posted' | 'refused';
  /** Why the entry was refused (`account_closed`, `insufficient_funds`, `no_such_account`); null when posted. */
  reason: string | null;
  /** For a refund: the withdrawal it gives back. */
  refundOf: string | null;
};

export interface Account {
  balance: number;
  /** A closed account refuses every entry. */
  closed?: boolean;
}

/** A request the bank keeps waiting (see `hold`). */
interface Held {
  /** Resolves when the request has arrived and is waiting. */
  arrived: Promise<void>;
  /** Lets it go: the bank posts the entry and answers, if anyone still listens. */
  release(): void;
  /** Resolves with the entry once it is posted (or refused). */
  done: Promise<Entry>;
}

export interface Bank {
  url: string;
  /** Every entry, in the order they were made. */
  entries(): Entry[];
  balance(account: string): number | undefined;
  /** How many POSTs of `kind` arrived, repeats under one key included. */
  requests(kind: EntryKind): number;
  loseResponse(kind: EntryKind): void;
  hold(kind: EntryKind): Held;
  close(): Promise<void>;
}

interface EntryRequest {
  kind: EntryKind;
  account: string;
  amount: number;
  refundOf: string | null;
}

const KINDS: readonly string[] = ['withdrawal', 'deposit', 'refund'];

function parseEntryRequest(body: unknown): EntryRequest | null {
  if (typeof body !== 'object' || body === null) return null;
  const { kind, account, amount, refundOf } = body as Record<string, unknown>;
  if (typeof kind !== 'string' || !KINDS.includes(kind)) return null;
  if (typeof account !== 'string' || account === '') return null;
  if (typeof amount !== 'number' || !Number.isSafeInteger(amount) || amount <= 0) return null;
  if (kind === 'refund' ? typeof refundOf !== 'string' : refundOf !== undefined && refundOf !== null)
    return null;
  return { kind: kind as EntryKind, account, amount, refundOf: (refundOf as string | undefined) ?? null };
}

async function readJson(req: http.IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    return undefined;
  }
}

function send(res: http.ServerResponse, status: number, body: unknown): void {
  // The caller may be gone (a killed worker): there is nobody to answer.
  if (res.destroyed || res.socket?.destroyed) return;
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
}

function deferred<T>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

export async function startBank(
  options: { accounts?: Record<string, Account>; port?: number } = {},
): Promise<Bank> {
  const accounts = new Map(Object.entries(options.accounts ?? {}).map(([id, a]) => [id, { ...a }]));
  const byKey = new Map<string, { request: EntryRequest; entry: Entry }>();
  const log: Entry[] = [];
  const requests = new Map<EntryKind, number>();
  const lose = new Set<EntryKind>();
  const holds = new Map<
    EntryKind,
    { arrived: () => void; released: Promise<void>; done: (e: Entry) => void }
  >();

  /** Posts or refuses a new entry: the bank's one effect. */
  function book(key: string, request: EntryRequest): Entry {
    const account = accounts.get(request.account);
    const reason = !account
      ? 'no_such_account'
      : account.closed
        ? 'account_closed'
        : request.kind === 'withdrawal' && account.balance < request.amount
          ? 'insufficient_funds'
          : null;
    if (account && !reason)
      account.balance += request.kind === 'withdrawal' ? -request.amount : request.amount;
    const entry: Entry = {
      id: `en_${log.length + 1}`,
      idempotencyKey: key,
      ...request,
      status: reason ? 'refused' : 'posted',
      reason,
    };
    byKey.set(key, { request, entry });
    log.push(entry);
    return entry;
  }

  async function postEntry(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const key = req.headers['idempotency-key'];
    const request = parseEntryRequest(await readJson(req));
    if (request) requests.set(request.kind, (requests.get(request.kind) ?? 0) + 1);
    if (typeof key !== 'string' || key === '') return send(res, 400, { error: 'idempotency_key_required' });
    if (!request) return send(res, 400, { error: 'invalid_request' });

    let seen = byKey.get(key);
    const hold = seen ? undefined : holds.get(request.kind);
    if (hold) {
      holds.delete(request.kind);
      hold.arrived();
      await hold.released;
      seen = byKey.get(key);
    }
    if (seen && JSON.stringify(seen.request) !== JSON.stringify(request)) {
      return send(res, 409, { error: 'idempotency_key_reused' });
    }
    const entry = seen?.entry ?? book(key, request);
    hold?.done(entry);
    if (!seen && lose.delete(request.kind)) {
      // The entry is booked; its answer never reaches the caller.
      req.socket.destroy();
      return;
    }
    send(res, entry.status === 'posted' ? 200 : 422, entry);
  }

  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://bank');
    if (url.pathname !== '/entries') return send(res, 404, { error: 'no_route' });
    if (req.method === 'GET') {
      const seen = byKey.get(url.searchParams.get('idempotency_key') ?? '');
      return seen ? send(res, 200, seen.entry) : send(res, 404, { error: 'not_found' });
    }
    if (req.method === 'POST') {
      postEntry(req, res).catch(() => send(res, 500, { error: 'internal' }));
      return;
    }
    send(res, 405, { error: 'method_not_allowed' });
  });
  await new Promise<void>((resolve) => server.listen(options.port ?? 0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    entries: () => log.map((e) => ({ ...e })),
    balance: (account) => accounts.get(account)?.balance,
    requests: (kind) => requests.get(kind) ?? 0,
    loseResponse: (kind) => void lose.add(kind),
    hold(kind) {
      const arrived = deferred<void>();
      const released = deferred<void>();
      const done = deferred<Entry>();
      holds.set(kind, { arrived: arrived.resolve, released: released.promise, done: done.resolve });
      return { arrived: arrived.promise, release: () => released.resolve(), done: done.promise };
    },
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((err) => (err ? reject(err) : resolve()));
      }),
  };
}
