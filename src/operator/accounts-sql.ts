/**
 * Named operator credentials: the `operators` table (migrations/0016) and the
 * only module that queries it. A token is `opk_<43 base64url characters>`
 * (256 random bits), printed once by `npm run ops -- operator add NAME`; only
 * its SHA-256 is stored. The admin API finds the operator by that hash and
 * records the operator's name as the audit actor.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { Queryable } from '../db/index.ts';

export const OPERATOR_TOKEN_PREFIX = 'opk_';

/** The names the table's CHECK accepts: no spaces or control characters, so they read unambiguously in audit rows. */
export const OPERATOR_NAME = /^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$/;

export function generateOperatorToken(): string {
  return `${OPERATOR_TOKEN_PREFIX}${randomBytes(32).toString('base64url')}`;
}

export function hashOperatorToken(token: string): string {
  return createHash('sha256').update(token, 'utf8').digest('hex');
}

export interface OperatorRow {
  name: string;
  createdAt: Date;
  revokedAt: Date | null;
}

/** The name of the active (not revoked) operator holding this token hash, if any. */
export async function findActiveOperatorByTokenHash(
  db: Queryable,
  tokenHash: string,
): Promise<string | null> {
  const { rows } = await db.query<{ name: string }>(
    `select name from operators where token_hash = $1 and revoked_at is null`,
    [tokenHash],
  );
  return rows[0]?.name ?? null;
}

/**
 * Adds an operator; false if the name exists (active or revoked: a name is
 * never reused, so old audit rows keep naming one person). The primary key
 * decides, not a read before the insert.
 */
export async function insertOperator(
  db: Queryable,
  o: { name: string; tokenHash: string },
): Promise<boolean> {
  const { rowCount } = await db.query(
    `insert into operators (name, token_hash) values ($1, $2) on conflict (name) do nothing returning name`,
    [o.name, o.tokenHash],
  );
  return rowCount === 1;
}

/** Revokes an active operator; null if there is no such operator, the existing row if it was already revoked. */
export async function revokeOperator(
  db: Queryable,
  name: string,
): Promise<{ revoked: boolean; row: OperatorRow } | null> {
  const { rows } = await db.query<{ name: string; created_at: Date; revoked_at: Date; revoked: boolean }>(
    // Conditional update, then the row either way: one round trip, and a second revoke keeps the first time.
    `with updated as (
       update operators set revoked_at = now() where name = $1 and revoked_at is null
       returning name, created_at, revoked_at
     )
     select name, created_at, revoked_at, true as revoked from updated
     union all
     select name, created_at, revoked_at, false from operators where name = $1 and not exists (select 1 from updated)`,
    [name],
  );
  const row = rows[0];
  if (!row) return null;
  return {
    revoked: row.revoked,
    row: { name: row.name, createdAt: row.created_at, revokedAt: row.revoked_at },
  };
}

export async function listOperators(db: Queryable): Promise<OperatorRow[]> {
  const { rows } = await db.query<{ name: string; created_at: Date; revoked_at: Date | null }>(
    `select name, created_at, revoked_at from operators order by name`,
  );
  return rows.map((r) => ({ name: r.name, createdAt: r.created_at, revokedAt: r.revoked_at }));
}
