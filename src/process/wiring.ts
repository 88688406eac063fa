/**
 * The dependencies more than one process builds, written once: the Postgres
 * pool, the ledger on it, a Temporal client and the provider adapters. Each
 * function that opens something registers its close on the caller's
 * `Resources`, so the order of the calls in a `main()` is the order of the
 * closes, reversed.
 */
import { Client, Connection, type ClientInterceptors } from '@temporalio/client';
import type { Config } from '../config.ts';
import { createPool, poolTimeoutOptions, type Pool, type PoolTimeouts } from '../db/index.ts';
import { Ledger, type LedgerHooks } from 'onceflow';
import { createSandboxEmailProvider, createSandboxPaymentProvider } from '../providers/sandbox.ts';
import { createSmtpEmailProvider } from '../providers/smtp.ts';
import { createStripePaymentProvider } from '../providers/stripe.ts';
import type { EmailProvider, PaymentProvider } from '../providers/types.ts';
import { connectionSettings } from '../temporal/connection.ts';
import type { Resources } from './resources.ts';

/**
 * A pool on DATABASE_URL; connections open on first use and close with the resources.
 * `applicationName` names the process's connections in pg_stat_activity and the server log
 * (a fallback: an application_name in DATABASE_URL or PGAPPNAME wins).
 */
export function openPool(
  resources: Resources,
  config: Config,
  opts: { max?: number; applicationName?: string; timeouts?: PoolTimeouts } = {},
): Pool {
  return resources.add(
    'postgres pool',
    createPool(config.databaseUrl, {
      ...(opts.max ? { max: opts.max } : {}),
      ...(opts.applicationName ? { fallback_application_name: opts.applicationName } : {}),
      ...(opts.timeouts ? poolTimeoutOptions(opts.timeouts) : {}),
    }),
    (pool) => pool.end(),
  );
}

/**
 * The API's pool bounds (API_DB_*, docs/DEPLOYING.md "Postgres timeouts"). Its transactions send
 * their statements back to back, so one that stays idle for seconds lost its client (a partition hid
 * its COMMIT): Postgres ends it then, releasing its rows and its Idempotency-Key for a retry.
 */
export function apiPoolTimeouts(config: Config): PoolTimeouts {
  const db = config.api.db;
  return {
    connectMs: db.connectTimeoutMs,
    statementMs: db.statementTimeoutMs,
    queryMs: db.queryTimeoutMs,
    idleInTransactionMs: API_IDLE_IN_TRANSACTION_MS,
  };
}

const API_IDLE_IN_TRANSACTION_MS = 10_000;

/** `localWaitMs`: how long a duplicate waits for a local step's first attempt (the API: config.api.db). */
export function createLedger(
  pool: Pool,
  config: Config,
  hooks?: LedgerHooks,
  opts: { localWaitMs?: number } = {},
): Ledger {
  return new Ledger(pool, {
    leaseMs: config.ledgerLeaseMs,
    ...(hooks ? { hooks } : {}),
    ...(opts.localWaitMs !== undefined ? { localWaitMs: opts.localWaitMs } : {}),
  });
}

/**
 * A Temporal client on config.temporal.address. Lazy: nothing connects until
 * the first call, so a process can start (and the API accept orders) while
 * Temporal is unreachable.
 */
export function openTemporalClient(
  resources: Resources,
  config: Config,
  opts: { interceptors?: ClientInterceptors } = {},
): Client {
  const connection = resources.add(
    'temporal client connection',
    Connection.lazy(connectionSettings(config.temporal.address)),
    (c) => c.close(),
  );
  return new Client({ connection, namespace: config.temporal.namespace, interceptors: opts.interceptors });
}

/**
 * The payment and email adapters PAYMENT_PROVIDER and EMAIL_PROVIDER name
 * (docs/PROVIDERS.md). Each declares how its uncertain outcomes are settled;
 * the steps follow that, so nothing else changes with the choice.
 */
export function configuredProviders(config: Config): { payments: PaymentProvider; email: EmailProvider } {
  const sandbox = { baseUrl: config.sandboxUrl, timeoutMs: config.providerTimeoutMs };
  const { stripe, smtp } = config.providers;
  return {
    payments:
      config.providers.payment === 'stripe'
        ? createStripePaymentProvider({
            secretKey: stripe.secretKey,
            apiBase: stripe.apiBase,
            timeoutMs: config.providerTimeoutMs,
            keyWindowMs: stripe.keyWindowMs,
            searchLagMs: stripe.searchLagMs,
          })
        : createSandboxPaymentProvider(sandbox),
    email:
      config.providers.email === 'smtp'
        ? createSmtpEmailProvider({
            url: smtp.url,
            from: smtp.from,
            timeoutMs: config.providerTimeoutMs,
            uncertainPolicy: smtp.uncertainPolicy,
          })
        : createSandboxEmailProvider(sandbox),
  };
}
