/**
 * GET /readyz, cheap enough to leave public and unlimited:
 * - one check at a time, its result cached for `ttlMs`, so a flood costs one check per second;
 * - Postgres on a fresh connection of its own: a probe must not take a pool connection an order
 *   needs, and a persistent one could look healthy while new connections are refused;
 * - ready means Postgres answers; Temporal down is reported, not fatal (the outbox catches up).
 */
import pg from 'pg';
import type { Client } from '@temporalio/client';
import type { Pool } from '../db/index.ts';
import { errorFields, log } from '../log.ts';

type CheckState = 'ok' | 'unavailable';

export interface ReadinessResult {
  ready: boolean;
  checks: { postgres: CheckState; temporal: CheckState };
}

export interface ReadinessOptions {
  /** Its connection settings (database, credentials, TLS) are the check's; its connections are not used. */
  pool: Pool;
  temporal: Client;
  /** How long a result answers probes. Default 1 000 ms. */
  ttlMs?: number;
  /** Bound of each check. Default 1 000 ms. */
  timeoutMs?: number;
}

function bounded<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not answer within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

async function pingPostgres(pool: Pool, timeoutMs: number): Promise<void> {
  const client = new pg.Client({
    ...pool.options,
    connectionTimeoutMillis: timeoutMs,
    query_timeout: timeoutMs,
    statement_timeout: timeoutMs,
    // `onceflow-api-readiness` in pg_stat_activity (an application_name in DATABASE_URL still wins).
    fallback_application_name: `${pool.options.fallback_application_name ?? 'onceflow'}-readiness`,
  });
  // A connection that fails after connect() emits 'error'; unheard, it would end the process.
  client.on('error', () => undefined);
  try {
    // The outer bound also covers a server that accepts TCP and then stalls the start-up handshake.
    await bounded(
      (async () => {
        await client.connect();
        await client.query('select 1');
      })(),
      timeoutMs,
      'postgres',
    );
  } finally {
    // Not awaited: ending a connection to a server that hangs would wait for it.
    client.end().catch(() => undefined);
  }
}

async function pingTemporal(temporal: Client, timeoutMs: number): Promise<void> {
  // The deadline stops the SDK retrying; the outer bound covers a connection not yet established.
  await bounded(
    temporal.connection.withDeadline(Date.now() + timeoutMs, () =>
      temporal.workflowService.getSystemInfo({}),
    ),
    timeoutMs + 100,
    'temporal',
  );
}

export class Readiness {
  readonly #pool: Pool;
  readonly #temporal: Client;
  readonly #ttlMs: number;
  readonly #timeoutMs: number;
  #inFlight: Promise<ReadinessResult> | undefined;
  #last: { result: ReadinessResult; at: number } | undefined;

  constructor(opts: ReadinessOptions) {
    this.#pool = opts.pool;
    this.#temporal = opts.temporal;
    this.#ttlMs = opts.ttlMs ?? 1_000;
    this.#timeoutMs = opts.timeoutMs ?? 1_000;
  }

  /** The last result if younger than `ttlMs`, else the check in flight, else a new check. */
  check(): Promise<ReadinessResult> {
    if (this.#last && performance.now() - this.#last.at < this.#ttlMs) {
      return Promise.resolve(this.#last.result);
    }
    this.#inFlight ??= this.#run().finally(() => {
      this.#inFlight = undefined;
    });
    return this.#inFlight;
  }

  async #run(): Promise<ReadinessResult> {
    const state = async (name: string, fn: () => Promise<void>): Promise<CheckState> => {
      try {
        await fn();
        return 'ok';
      } catch (err) {
        log.warn('readiness check failed', { check: name, ...errorFields(err) });
        return 'unavailable';
      }
    };
    const [postgres, temporal] = await Promise.all([
      state('postgres', () => pingPostgres(this.#pool, this.#timeoutMs)),
      state('temporal', () => pingTemporal(this.#temporal, this.#timeoutMs)),
    ]);
    const result: ReadinessResult = { ready: postgres === 'ok', checks: { postgres, temporal } };
    // Cached from when the check ended: a slow check is not repeated at once.
    this.#last = { result, at: performance.now() };
    return result;
  }
}
