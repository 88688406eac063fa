/**
 * Wakes `GET /v1/orders/{id}?wait=N` long-polls the moment the order
 * reaches a terminal status, instead of on a timed re-read.
 *
 * A change to a terminal status notifies channel `order_status` with
 * `<id> <status>` (a trigger, migrations/0012 to 0014, so every writer does
 * it, at commit; since 0014 other changes do not notify at all). Each API
 * process listens on ONE dedicated connection, outside the pool, and wakes
 * the waiters of that id when the status is terminal (a wait is for a
 * terminal status; an older trigger's non-terminal payloads are ignored). A
 * notification is only a hint: the waiter re-reads the row, which stays the
 * truth. A bare id (the trigger of migration 0012) wakes.
 *
 * Liveness: the listening connection can die (Postgres restarted,
 * pg_terminate_backend, a reset socket). Then every waiter is woken once,
 * re-reads, and falls back to timed re-reads while the listener reconnects
 * with backoff. The fallback backs off too: each waiter's re-read interval
 * starts at `fallbackPollMs` and doubles up to `maxFallbackPollMs`, with
 * jitter, so an outage does not turn every open long-poll into a query every
 * 250 ms, and waiters that started together do not re-read in lockstep. A
 * failed reconnect wakes nobody (it changed nothing). Once it listens again,
 * every waiter is woken once more (a notification sent while it was down is
 * lost, so each re-reads), its backoff starts over, and it waits for
 * notifications again, with a slow re-read every `listeningPollMs` as a
 * safety net.
 */
import pg from 'pg';
import { backoffMs, type Backoff } from 'onceflow/postgres';
import type { Pool } from '../db/index.ts';
import { errorFields, log } from '../log.ts';
import { TERMINAL_STATUSES, type OrderStatus } from '../orders/model.ts';

const ORDER_STATUS_CHANNEL = 'order_status';

/**
 * The order a notification is about, and whether its waiters should wake:
 * `<id> <status>` wakes them only for a terminal status; a bare id (older
 * trigger) always does.
 */
export function parseStatusNotification(payload: string): { orderId: string; wake: boolean } {
  const space = payload.lastIndexOf(' ');
  if (space < 0) return { orderId: payload, wake: true };
  const status = payload.slice(space + 1) as OrderStatus;
  return { orderId: payload.slice(0, space), wake: TERMINAL_STATUSES.includes(status) };
}

export interface OrderWaitsOptions {
  /** Connection settings of the listening connection: the pool's, so it reaches the same database. */
  pool: Pool;
  /** Re-read interval while listening: only a safety net. Default 5000 ms. */
  listeningPollMs?: number;
  /** First re-read interval while the listener is down; doubles (with jitter) up to `maxFallbackPollMs`. Default 250 ms. */
  fallbackPollMs?: number;
  /** Longest re-read interval while the listener is down. Default 4000 ms. */
  maxFallbackPollMs?: number;
  /** First reconnect delay; doubles up to `maxReconnectMs`. Defaults 250 ms and 5000 ms. */
  reconnectMs?: number;
  maxReconnectMs?: number;
}

/** One request's wait on one order. Register (watch) BEFORE reading the status, so no change slips between. */
export interface OrderWait {
  /**
   * Resolves when the order's status may have changed since the last call
   * (a notification, the listener going down or up) or after the current
   * re-read interval, whichever is first, and at the latest after `maxMs`;
   * at once when `signal` aborts.
   */
  next(maxMs: number, signal?: AbortSignal): Promise<void>;
  /** Stops watching; call it in a finally. */
  done(): void;
}

export class OrderWaits {
  readonly #pool: Pool;
  readonly #listeningPollMs: number;
  /** Each waiter's re-reads while nothing listens; each drawn from its upper half ("equal jitter"). */
  readonly #fallback: Backoff;
  readonly #reconnect: Backoff;
  readonly #waiters = new Map<string, Set<() => void>>();
  #client: pg.Client | null = null;
  #listening = false;
  #stopped = true;
  /** Failed connects since the listener was last up: the reconnect backoff's step. */
  #reconnects = 0;
  #retryTimer: NodeJS.Timeout | null = null;

  constructor(opts: OrderWaitsOptions) {
    this.#pool = opts.pool;
    this.#listeningPollMs = opts.listeningPollMs ?? 5000;
    const fallbackPollMs = opts.fallbackPollMs ?? 250;
    this.#fallback = {
      initialMs: fallbackPollMs,
      maxMs: Math.max(fallbackPollMs, opts.maxFallbackPollMs ?? 4000),
      jitter: 0.5,
    };
    this.#reconnect = { initialMs: opts.reconnectMs ?? 250, maxMs: opts.maxReconnectMs ?? 5000, jitter: 0 };
  }

  /** True while the listening connection is up and LISTENing. */
  get listening(): boolean {
    return this.#listening;
  }

  /** Requests waiting right now, over all orders. */
  get waiting(): number {
    let n = 0;
    for (const set of this.#waiters.values()) n += set.size;
    return n;
  }

  /** The listening connection's backend PID while it listens (for operators and tests), else null. */
  get backendPid(): number | null {
    const client = this.#client as (pg.Client & { processID?: number | null }) | null;
    return this.#listening ? (client?.processID ?? null) : null;
  }

  /** Starts listening in the background; never throws (waiters poll until it listens). */
  start(): void {
    if (!this.#stopped) return;
    this.#stopped = false;
    void this.#connect();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#retryTimer) clearTimeout(this.#retryTimer);
    this.#retryTimer = null;
    const client = this.#client;
    this.#client = null;
    this.#listening = false;
    this.#wakeAll();
    if (client) await client.end().catch(() => undefined);
  }

  /**
   * A long-poll: reads until `done(row)` (or no row), the deadline, or `aborted()`, watching
   * `id` before the first read so a change between a read and the wait still wakes it. Each
   * pass reads the whole row, so the last read is the answer. With `waitMs` 0, one read.
   * `signal` (the client hung up) also ends the wait at once, without another read: the
   * answer is for nobody, so what it returns then is the last row read.
   */
  async readUntil<T>(
    id: string,
    waitMs: number,
    read: () => Promise<T | null>,
    done: (row: T) => boolean,
    aborted: () => boolean,
    signal?: AbortSignal,
  ): Promise<T | null> {
    if (waitMs <= 0) return read();
    const deadline = Date.now() + waitMs;
    const wait = this.watch(id);
    try {
      for (;;) {
        const row = await read();
        if (row === null || done(row) || Date.now() >= deadline || aborted() || signal?.aborted) return row;
        // Woken by a terminal status's notification, else re-read on the interval.
        await wait.next(deadline - Date.now(), signal);
        if (signal?.aborted) return row;
      }
    } finally {
      wait.done();
    }
  }

  watch(orderId: string): OrderWait {
    let changed = false;
    let wake: (() => void) | null = null;
    /** Timed re-reads since the listener was last seen up: this waiter's backoff step. */
    let fallbackReads = 0;
    const onChange = () => {
      changed = true;
      wake?.();
    };
    let set = this.#waiters.get(orderId);
    if (!set) this.#waiters.set(orderId, (set = new Set()));
    set.add(onChange);
    return {
      next: (maxMs, signal) => {
        if (changed) {
          changed = false;
          return Promise.resolve();
        }
        if (signal?.aborted) return Promise.resolve();
        let interval: number;
        if (this.#listening) {
          fallbackReads = 0;
          interval = this.#listeningPollMs;
        } else {
          interval = backoffMs(this.#fallback, fallbackReads++);
        }
        return new Promise<void>((resolve) => {
          const timer = setTimeout(finish, Math.max(0, Math.min(maxMs, interval)));
          signal?.addEventListener('abort', finish, { once: true });
          function finish() {
            clearTimeout(timer);
            signal?.removeEventListener('abort', finish);
            wake = null;
            changed = false;
            resolve();
          }
          wake = finish;
        });
      },
      done: () => {
        wake?.();
        const current = this.#waiters.get(orderId);
        current?.delete(onChange);
        if (current?.size === 0) this.#waiters.delete(orderId);
      },
    };
  }

  #wake(orderId: string): void {
    for (const onChange of this.#waiters.get(orderId) ?? []) onChange();
  }

  #wakeAll(): void {
    for (const set of this.#waiters.values()) for (const onChange of set) onChange();
  }

  async #connect(): Promise<void> {
    if (this.#stopped) return;
    const client = new pg.Client({ ...this.#pool.options, keepAlive: true });
    this.#client = client;
    // Registered before connect: an 'error' with no listener would kill the process.
    client.on('error', (err) => this.#lost(client, err));
    client.on('end', () => this.#lost(client, new Error('listening connection ended')));
    client.on('notification', (msg) => {
      if (msg.channel !== ORDER_STATUS_CHANNEL || !msg.payload) return;
      const { orderId, wake } = parseStatusNotification(msg.payload);
      if (wake) this.#wake(orderId);
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${ORDER_STATUS_CHANNEL}`);
    } catch (err) {
      this.#lost(client, err);
      return;
    }
    if (this.#client !== client) return; // lost or stopped meanwhile
    this.#listening = true;
    this.#reconnects = 0;
    // Changes made while nobody listened were not announced: every waiter re-reads once.
    this.#wakeAll();
  }

  #lost(client: pg.Client, err: unknown): void {
    if (this.#client !== client) return; // an old connection's late event
    this.#client = null;
    const wasListening = this.#listening;
    this.#listening = false;
    client.end().catch(() => undefined);
    if (this.#stopped) return;
    if (wasListening) {
      log.warn('order-status listener lost; long-polls re-read on a backoff until it reconnects', {
        ...errorFields(err),
      });
      // Waiters switch to the fallback re-reads now, not after the slow interval. A failed
      // reconnect (not listening before either) changes nothing for them: no wake.
      this.#wakeAll();
    }
    const delay = backoffMs(this.#reconnect, this.#reconnects++);
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = null;
      void this.#connect();
    }, delay);
    this.#retryTimer.unref();
  }
}
