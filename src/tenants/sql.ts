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
