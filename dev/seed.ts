/**
 * Demo data for local runs and tests: the two demo tenants and their API keys
 * (src/api/demo-keys.ts lists them). `seedDemoData` refuses an exposed API
 * (config.exposure: a non-loopback bind, a proxy, NODE_ENV=production).
 * `npm start` seeds when not exposed; `npm run seed` does it by hand; the test
 * setup seeds its throwaway database. A dev tool: it does not ship.
 */
import { hashApiKey } from '../src/api/auth.ts';
import { DEMO_TENANTS, exposureOfWhere, type Where } from '../src/api/demo-keys.ts';
import { insertApiKeyIfAbsent, insertTenant } from '../src/tenants/sql.ts';
import { ConfigError } from '../src/config.ts';
import type { Queryable } from '../src/db/index.ts';

const LABEL = 'demo key (local only; npm run seed)';

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
