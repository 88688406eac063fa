// `npm run api-key -- <tenant> [--create-tenant] [--name "Tenant name"] [--label "what it is for"]`
// Adds an API key for a tenant and prints it ONCE: only its SHA-256 is stored.
import { parseArgs } from 'node:util';
import { loadConfig } from '../src/config.ts';
import { createPool, withTransaction } from '../src/db/index.ts';
import { generateApiKey, hashApiKey } from '../src/api/auth.ts';
import { insertApiKey, insertTenant, tenantExists } from '../src/api/sql.ts';

const usage =
  'usage: npm run api-key -- <tenant-id> [--create-tenant] [--name "Tenant name"] [--label "purpose"] [--live]';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    'create-tenant': { type: 'boolean', default: false },
    name: { type: 'string' },
    label: { type: 'string', default: '' },
    live: { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h', default: false },
  },
});

const tenantId = positionals[0];
if (values.help || !tenantId || positionals.length > 1) {
  console.error(usage);
  process.exit(values.help ? 0 : 2);
}
if (!/^[a-z0-9][a-z0-9_-]{0,62}$/.test(tenantId)) {
  console.error('tenant id must be 1-63 characters of a-z, 0-9, "_" or "-", starting with a letter or digit');
  process.exit(2);
}

const config = loadConfig();
const pool = createPool(config.databaseUrl, { max: 1 });
try {
  const key = generateApiKey(values.live ? 'live' : 'test');
  const created = await withTransaction(pool, async (tx) => {
    let createdTenant = false;
    if (!(await tenantExists(tx, tenantId))) {
      if (!values['create-tenant']) {
        throw new Error(
          `tenant ${JSON.stringify(tenantId)} does not exist; pass --create-tenant to create it`,
        );
      }
      createdTenant = await insertTenant(tx, { id: tenantId, name: values.name ?? tenantId });
    }
    await insertApiKey(tx, { keyHash: hashApiKey(key), tenantId, label: values.label ?? '' });
    return createdTenant;
  });
  if (created) console.error(`Created tenant ${tenantId}.`);
  console.error(`New API key for tenant ${tenantId} (shown once; only its hash is stored):`);
  console.log(key);
} catch (err) {
  console.error(err instanceof Error ? err.message : String(err));
  process.exitCode = 1;
} finally {
  await pool.end();
}
