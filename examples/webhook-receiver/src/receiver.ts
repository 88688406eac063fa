/**
 * A receiver of onceflow's webhooks, doing what docs/API.md "Events (webhooks)" asks of one:
 *
 * 1. **Verify** the Standard Webhooks signature over the raw body (`verifyWebhook` from
 *    `@onceflow/client`); a bad or stale signature gets 400 and nothing is stored.
 * 2. **Deduplicate** on the event ID (`webhook-id`, the same on every retry): the event goes into
 *    the `webhook_inbox` table under its ID as the primary key, so a second delivery of it inserts
 *    nothing. The table, not memory: a restart must not forget what was received.
 * 3. **Answer 2xx at once**, as soon as the event is stored, before any work on it: a slow answer
 *    (10 s) counts as none, and onceflow sends the event again.
 * 4. **Process asynchronously**, in order of arrival, and **drop stale versions**: deliveries are not
 *    ordered, so the local copy of an order or refund moves only to a higher `data.version`.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type pg from 'pg';
import { verifyWebhook, WebhookVerificationError, type WebhookEvent } from '@onceflow/client';

/** Onceflow's deliveries are a few kilobytes; anything far larger is not one of them. */
const MAX_BODY_BYTES = 1024 * 1024;
/** How often the processor looks for work it missed (an error, another process's leftovers). */
const SWEEP_MS = 5_000;

/** The receiver's tables; `create if not exists`, so every start may run it. */
export const SCHEMA = `
  create table if not exists webhook_inbox (
    event_id     text        primary key,
    event_type   text        not null,
    object_id    text        not null,
    version      integer     not null,
    event        jsonb       not null,
    received_at  timestamptz not null default now(),
    processed_at timestamptz,
    -- applied: the local copy moved to this version; stale: it already had this one or a later one.
    outcome      text        check (outcome in ('applied', 'stale'))
  );
  create index if not exists webhook_inbox_unprocessed on webhook_inbox (received_at) where processed_at is null;
  -- The receiver's own view of each order and refund: what the events told it, newest version only.
  create table if not exists merchant_objects (
    object_id   text        primary key,
    object_type text        not null,
    status      text        not null,
    version     integer     not null,
    event_id    text        not null,
    updated_at  timestamptz not null default now()
  );`;

export interface ReceiverOptions {
  pool: pg.Pool;
  /** The endpoint's `whsec_…` secret; several while you switch to a rotated one (any may match). */
  secrets: readonly string[];
  port?: number;
  host?: string;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
}

export interface Receiver {
  url: string;
  /** Processes what is in the inbox now; resolves when none is left. */
  drain(): Promise<void>;
  close(): Promise<void>;
}

class BodyTooLarge extends Error {}

function readBody(req: http.IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        reject(new BodyTooLarge());
        req.destroy();
      } else chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

/** Stores the event under its ID; false when it was already there (a retry or a redelivery). */
async function store(pool: pg.Pool, event: WebhookEvent): Promise<boolean> {
  const { rowCount } = await pool.query(
    `insert into webhook_inbox (event_id, event_type, object_id, version, event)
     values ($1, $2, $3, $4, $5) on conflict (event_id) do nothing`,
    [event.id, event.type, event.data.object.id, event.data.version, JSON.stringify(event)],
  );
  return rowCount === 1;
}

/**
 * Takes the oldest unprocessed event and applies it in one transaction: the local copy moves to
 * its version only if that is newer, and the event is marked processed. False when none is left.
 */
async function processOne(pool: pg.Pool, log: NonNullable<ReceiverOptions['log']>): Promise<boolean> {
  const client = await pool.connect();
  try {
    await client.query('begin');
    const { rows } = await client.query<{ event: WebhookEvent }>(
      `select event from webhook_inbox where processed_at is null
        order by received_at, event_id limit 1 for update skip locked`,
    );
    const event = rows[0]?.event;
    if (!event) {
      await client.query('commit');
      return false;
    }
    const object = event.data.object;
    // Your business logic goes here, in this transaction. This example keeps the latest status.
    const applied = await client.query(
      `insert into merchant_objects (object_id, object_type, status, version, event_id)
       values ($1, $2, $3, $4, $5)
       on conflict (object_id) do update
         set status = excluded.status, version = excluded.version, event_id = excluded.event_id,
             updated_at = now()
       where merchant_objects.version < excluded.version`,
      [object.id, object.object, object.status, event.data.version, event.id],
    );
    const outcome = applied.rowCount === 1 ? 'applied' : 'stale';
    await client.query(`update webhook_inbox set processed_at = now(), outcome = $2 where event_id = $1`, [
      event.id,
      outcome,
    ]);
    await client.query('commit');
    log('event processed', {
      id: event.id,
      type: event.type,
      object: object.id,
      version: event.data.version,
      outcome,
    });
    return true;
  } catch (err) {
    await client.query('rollback').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}

export async function startReceiver(options: ReceiverOptions): Promise<Receiver> {
  const { pool, secrets } = options;
  const log = options.log ?? (() => undefined);
  if (secrets.length === 0) throw new Error('the receiver needs the endpoint secret (whsec_…)');
  await pool.query(SCHEMA);

  // One drain at a time; a wake-up during a drain runs another one after it.
  let draining: Promise<void> | null = null;
  let again = false;
  const drain = (): Promise<void> => {
    if (draining) {
      again = true;
      return draining;
    }
    draining = (async () => {
      do {
        again = false;
        while (await processOne(pool, log));
      } while (again);
    })()
      .catch((err: Error) => log('processing failed; the sweep retries it', { error: err.message }))
      .finally(() => (draining = null));
    return draining;
  };

  const server = http.createServer((req, res) => {
    const answer = (status: number, body: Record<string, unknown>) =>
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    if (req.method !== 'POST') return answer(405, { error: 'POST only' });
    void (async () => {
      let event: WebhookEvent;
      try {
        // The raw bytes as received: re-serialized JSON would not match the signature.
        event = verifyWebhook(secrets, await readBody(req), req.headers);
      } catch (err) {
        if (err instanceof BodyTooLarge) return answer(413, { error: 'body too large' });
        if (err instanceof WebhookVerificationError || err instanceof SyntaxError) {
          log('delivery refused', { error: err.message, id: req.headers['webhook-id'] });
          return answer(400, { error: err.message });
        }
        throw err;
      }
      let fresh: boolean;
      try {
        fresh = await store(pool, event);
      } catch (err) {
        // Not stored: not acknowledged either. onceflow sends it again later.
        log('could not store the event', { id: event.id, error: (err as Error).message });
        return answer(503, { error: 'try again later' });
      }
      // Acknowledged once stored (a duplicate too: it was stored before), before any processing.
      answer(200, { received: event.id, duplicate: !fresh });
      log(fresh ? 'event received' : 'duplicate ignored', { id: event.id, type: event.type });
      if (fresh) void drain();
    })().catch((err: Error) => {
      log('request failed', { error: err.message });
      if (!res.headersSent) answer(500, { error: 'internal error' });
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', resolve);
  });
  // What an earlier run stored but did not process (it stopped in between), then a periodic sweep.
  void drain();
  const sweep = setInterval(() => void drain(), SWEEP_MS);
  sweep.unref();

  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    url: `http://${host}:${address.port}/`,
    drain,
    async close() {
      clearInterval(sweep);
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await draining;
    },
  };
}
