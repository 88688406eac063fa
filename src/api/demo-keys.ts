/**
 * The published demo API keys, and the start-up check that refuses them on an
 * exposed API. The keys are in the README and docs/API.md, so they are
 * credentials only on loopback: production migrations don't carry them (0010
 * removes them from databases an older 0005 seeded), the dev seeding
 * (dev/seed.ts) refuses an exposed API, and an exposed API refuses to start
 * while they are active (`assertNoDemoKeys`, called by src/api/main.ts).
 */
import { hashApiKey } from './auth.ts';
import { findActiveKeyHashes } from '../tenants/sql.ts';
import { ConfigError, exposureOf, type Exposure } from '../config.ts';
import type { Queryable } from '../db/index.ts';

/**
 * Untagged on purpose: a tag depends on API_KEY_SECRET, and these strings are
 * published and fixed. So they take the lookup path of keys without a tag
 * (src/api/auth.ts), and API_KEY_ALLOW_UNTAGGED=off refuses them.
 */
export const DEMO_TENANTS = [
  { id: 'acme', name: 'Acme Corp (demo)', key: 'sk_test_acme_local' },
  { id: 'globex', name: 'Globex (demo)', key: 'sk_test_globex_local' },
] as const;

/**
 * `config.exposure`; a bare string is a bind host and nothing else, for
 * throwaway local databases (the test setup, bench, chaos) that have no proxy.
 */
export type Where = Exposure | string;
export const exposureOfWhere = (where: Where): Exposure =>
  typeof where === 'string' ? exposureOf({ bindHost: where, trustProxy: [] }) : where;

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
