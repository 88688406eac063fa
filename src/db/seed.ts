/**
 * Demo data for local runs and tests: the two demo tenants and their API keys.
 *
 * The keys are published (README, docs/API.md), so they are credentials only
 * on loopback: production migrations don't carry them (0010 removes them from
 * databases an older 0005 seeded), `seedDemoData` refuses an exposed API
 * (config.exposure: a non-loopback bind, a proxy, NODE_ENV=production), and
 * an exposed API refuses to start while they are active. `npm start` seeds
 * when not exposed; `npm run seed` does it by hand; the test setup seeds its
 * throwaway database.
 */
import { hashApiKey } from '../api/auth.ts';
import { findActiveKeyHashes, insertApiKeyIfAbsent, insertTenant } from '../tenants/sql.ts';
import { ConfigError, exposureOf, type Exposure } from '../config.ts';
import type { Queryable } from './index.ts';

/**
 * Untagged on purpose: a tag depends on API_KEY_SECRET, and these strings are
 * published and fixed. So they take the lookup path of keys without a tag
 * (src/api/auth.ts), and API_KEY_ALLOW_UNTAGGED=off refuses them.
 */
export const DEMO_TENANTS = [
  { id: 'acme', name: 'Acme Corp (demo)', key: 'sk_test_acme_local' },
  { id: 'globex', name: 'Globex (demo)', key: 'sk_test_globex_local' },
] as const;

const LABEL = 'demo key (local only; npm run seed)';

/**
 * `config.exposure`; a bare string is a bind host and nothing else, for
 * throwaway local databases (the test setup, bench, chaos) that have no proxy.
 */
type Where = Exposure | string;
const exposureOfWhere = (where: Where): Exposure =>
  typeof where === 'string' ? exposureOf({ bindHost: where, trustProxy: [] }) : where;

/** Adds the demo tenants and keys if missing; returns the keys it added. Refuses an exposed API. */
export async function seedDemoData(db: Queryable, where: Where): Promise<string[]> {
  const exposure = exposureOfWhere(where);
  if (exposure.exposed) {
    throw new ConfigError(
      `Refusing to seed the published demo API keys: the API may be reachable from other hosts ` +
        `(${exposure.reasons.join('; ')}). Create real keys with \`npm run api-key -- <tenant> --create-tenant\`.`,
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
 * For an exposed API about to listen: throws `ConfigError` if a published
 * demo key would still authenticate. Not exposed, it does nothing.
 */
export async function assertNoDemoKeys(db: Queryable, where: Where): Promise<void> {
  const exposure = exposureOfWhere(where);
  if (!exposure.exposed) return;
  const active = await findActiveKeyHashes(
    db,
    DEMO_TENANTS.map((t) => hashApiKey(t.key)),
  );
  if (active.length > 0) {
    const names = DEMO_TENANTS.filter((t) => active.includes(hashApiKey(t.key))).map((t) => t.key);
    throw new ConfigError(
      `The published demo API keys (${names.join(', ')}) are active in this database while the API may be ` +
        `reachable from other hosts (${exposure.reasons.join('; ')}); anyone could use them. ` +
        'Run `npm run migrate` (0010 removes them) or ' +
        "`update api_keys set revoked_at = now() where label like 'demo key%'`, then start again.",
    );
  }
}
