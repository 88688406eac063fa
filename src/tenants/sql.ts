/**
 * SQL for the `tenants` and `api_keys` tables, and the only module that
 * queries them. A key is stored by its hash only; a tenant comes from the
 * caller's key, never from a request field.
 */
import type { Queryable } from '../db/index.ts';

export async function findTenantByKeyHash(db: Queryable, keyHash: string): Promise<string | null> {
  const { rows } = await db.query<{ tenant_id: string }>(
    `select tenant_id from api_keys where key_hash = $1 and revoked_at is null`,
    [keyHash],
  );
  return rows[0]?.tenant_id ?? null;
}

/** Seeding: adds the key unless its hash is already there (a revoked demo key stays revoked). */
export async function insertApiKeyIfAbsent(
  db: Queryable,
  k: { keyHash: string; tenantId: string; label: string },
): Promise<boolean> {
  const { rowCount } = await db.query(
    `insert into api_keys (key_hash, tenant_id, label) values ($1, $2, $3)
     on conflict (key_hash) do nothing returning key_hash`,
    [k.keyHash, k.tenantId, k.label],
  );
  return rowCount === 1;
}

/** Which of these key hashes would authenticate today (not revoked). */
export async function findActiveKeyHashes(db: Queryable, keyHashes: string[]): Promise<string[]> {
  const { rows } = await db.query<{ key_hash: string }>(
    `select key_hash from api_keys where key_hash = any($1::text[]) and revoked_at is null`,
    [keyHashes],
  );
  return rows.map((r) => r.key_hash);
}

export async function insertTenant(db: Queryable, t: { id: string; name: string }): Promise<boolean> {
  const { rowCount } = await db.query(
    `insert into tenants (id, name) values ($1, $2) on conflict (id) do nothing returning id`,
    [t.id, t.name],
  );
  return rowCount === 1;
}

export async function tenantExists(db: Queryable, id: string): Promise<boolean> {
  const { rowCount } = await db.query(`select 1 from tenants where id = $1`, [id]);
  return rowCount === 1;
}

export async function insertApiKey(
  db: Queryable,
  k: { keyHash: string; tenantId: string; label: string },
): Promise<void> {
  await db.query(`insert into api_keys (key_hash, tenant_id, label) values ($1, $2, $3) returning key_hash`, [
    k.keyHash,
    k.tenantId,
    k.label,
  ]);
}

/** A key's public ID: the first 12 hex digits of its hash, enough to tell keys apart, useless to a thief. */
export const API_KEY_ID_LENGTH = 12;

export interface ApiKeyRow {
  id: string;
  tenantId: string;
  label: string;
  createdAt: Date;
  revokedAt: Date | null;
}

/** Keys, newest first, never the hash or the key. */
export async function listApiKeys(
  db: Queryable,
  f: { tenantId?: string; limit: number },
): Promise<ApiKeyRow[]> {
  const { rows } = await db.query<{
    id: string;
    tenant_id: string;
    label: string;
    created_at: Date;
    revoked_at: Date | null;
  }>(
    `select left(key_hash, ${API_KEY_ID_LENGTH}) as id, tenant_id, label, created_at, revoked_at from api_keys
      where ($1::text is null or tenant_id = $1) order by created_at desc, key_hash limit $2`,
    [f.tenantId ?? null, f.limit],
  );
  return rows.map((r) => ({
    id: r.id,
    tenantId: r.tenant_id,
    label: r.label,
    createdAt: r.created_at,
    revokedAt: r.revoked_at,
  }));
}

/** Revokes the one key whose hash starts with `idPrefix`; 'ambiguous' when several match. */
export async function revokeApiKey(
  db: Queryable,
  idPrefix: string,
): Promise<{ found: 'none' } | { found: 'ambiguous' } | { found: 'one'; revoked: boolean; row: ApiKeyRow }> {
  const { rows } = await db.query<{ key_hash: string }>(
    `select key_hash from api_keys where key_hash like $1 || '%' limit 2`,
    [idPrefix],
  );
  if (rows.length === 0) return { found: 'none' };
  if (rows.length > 1) return { found: 'ambiguous' };
  const keyHash = rows[0]!.key_hash;
  // Only an active key changes, so a second revoke keeps the first revocation time.
  const { rowCount } = await db.query(
    `update api_keys set revoked_at = now() where key_hash = $1 and revoked_at is null`,
    [keyHash],
  );
  const { rows: after } = await db.query<{
    id: string;
    tenant_id: string;
    label: string;
    created_at: Date;
    revoked_at: Date | null;
  }>(
    `select left(key_hash, ${API_KEY_ID_LENGTH}) as id, tenant_id, label, created_at, revoked_at
       from api_keys where key_hash = $1`,
    [keyHash],
  );
  const r = after[0]!;
  return {
    found: 'one',
    revoked: rowCount === 1,
    row: {
      id: r.id,
      tenantId: r.tenant_id,
      label: r.label,
      createdAt: r.created_at,
      revokedAt: r.revoked_at,
    },
  };
}
