/**
 * Demo data for local runs and tests: the two demo tenants and their API keys.
 *
 * The keys are published (README, docs/API.md), so they are credentials only
 * on loopback: production migrations don't carry them (0010 removes them from
 * databases an older 0005 seeded), `seedDemoData` refuses an exposed bind,
 * and an API on an exposed bind refuses to start while they are active.
 * `npm start` seeds on loopback; `npm run seed` does it by hand; the test
 * setup seeds its throwaway database.
 */
import { hashApiKey } from '../api/auth.ts';
import { findActiveKeyHashes, insertApiKeyIfAbsent, insertTenant } from '../tenants/sql.ts';
import { ConfigError, isLoopbackHost } from '../config.ts';
import type { Queryable } from './index.ts';

export const DEMO_TENANTS = [
  { id: 'acme', name: 'Acme Corp (demo)', key: 'sk_test_acme_local' },
  { id: 'globex', name: 'Globex (demo)', key: 'sk_test_globex_local' },
] as const;

const LABEL = 'demo key (local only; npm run seed)';

/** Adds the demo tenants and keys if missing; returns the keys it added. Refuses an exposed BIND_HOST. */
export async function seedDemoData(db: Queryable, bindHost: string): Promise<string[]> {
  if (!isLoopbackHost(bindHost)) {
    throw new ConfigError(
      `Refusing to seed the published demo API keys while BIND_HOST=${bindHost} is not a loopback address. ` +
        'Create real keys with `npm run api-key -- <tenant> --create-tenant`.',
    );
  }
  const added: string[] = [];
  for (const t of DEMO_TENANTS) {
    await insertTenant(db, { id: t.id, name: t.name });
    if (await insertApiKeyIfAbsent(db, { keyHash: hashApiKey(t.key), tenantId: t.id, label: LABEL })) {
      added.push(t.key);
    }
  }
  return added;
}

/**
 * For an API about to listen on an exposed address: throws `ConfigError` if
 * a published demo key would still authenticate. On loopback it does nothing.
 */
export async function assertNoDemoKeys(db: Queryable, bindHost: string): Promise<void> {
  if (isLoopbackHost(bindHost)) return;
  const active = await findActiveKeyHashes(
    db,
    DEMO_TENANTS.map((t) => hashApiKey(t.key)),
  );
  if (active.length > 0) {
    const names = DEMO_TENANTS.filter((t) => active.includes(hashApiKey(t.key))).map((t) => t.key);
    throw new ConfigError(
      `The published demo API keys (${names.join(', ')}) are active in this database while BIND_HOST=${bindHost} ` +
        'is not a loopback address; anyone could use them. Run `npm run migrate` (0010 removes them) or ' +
        "`update api_keys set revoked_at = now() where label like 'demo key%'`, then start again.",
    );
  }
}
