/**
 * The published demo API keys, credentials only on loopback: an exposed API refuses to start while
 * they are active (`assertNoDemoKeys`).
 */
import { hashApiKey } from './auth.ts';
import { findActiveKeyHashes } from '../tenants/sql.ts';
import { ConfigError } from '../config.ts';
import { exposureOf, type Exposure } from '../config/credentials.ts';
import type { Queryable } from '../db/index.ts';

/**
 * Untagged: a tag depends on API_KEY_SECRET, and these are fixed; API_KEY_ALLOW_UNTAGGED=off refuses them.
 */
export const DEMO_TENANTS = [
  { id: 'acme', name: 'Acme Corp (demo)', key: 'sk_test_acme_local' },
  { id: 'globex', name: 'Globex (demo)', key: 'sk_test_globex_local' },
] as const;

/** `config.exposure`, or a bare bind host for throwaway local stacks. */
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
