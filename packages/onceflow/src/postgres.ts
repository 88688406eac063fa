/**
 * `onceflow/postgres`: the Postgres access the ledger runs on, for an
 * application that shares the ledger's `pg.Pool` and wants the same
 * guarantees for its own queries: a client that failed or was left inside a
 * transaction is discarded, never handed to the next caller, and a
 * transaction that lost a serialization race or a deadlock is run again.
 */
export {
  withClient,
  withTransaction,
  pipelined,
  isSqlState,
  SQLSTATE,
  backoffMs,
  type Backoff,
  type Pool,
  type PoolClient,
  type Queryable,
} from './db.ts';
