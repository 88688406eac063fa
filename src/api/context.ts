/** What the routes of the API share, wired once by `buildApiApp`. */
import type { Client } from '@temporalio/client';
import type { Config } from '../config.ts';
import type { Pool } from '../db/index.ts';
import type { Ledger } from 'onceflow';
import type { OrderWaits } from './order-waits.ts';
import type { OutboxRelay } from './outbox.ts';
import type { RecoveryGate } from '../restore/gate.ts';

export interface ApiContext {
  pool: Pool;
  ledger: Ledger;
  temporal: Client;
  config: Config;
  relay: OutboxRelay;
  orderWaits: OrderWaits;
  /** Whether a recovery after a database restore is pending: creates answer 503 while it is. */
  recovery: RecoveryGate;
}

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by the auth hook on routes with `config.auth`; from the API key, never from the request. */
    tenantId?: string;
  }
  interface FastifyContextConfig {
    /** The route needs `Authorization: Bearer <api key>`. */
    auth?: boolean;
  }
}
