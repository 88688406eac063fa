// `npm run api-key -- <tenant> [--create-tenant] [--name "Tenant name"] [--label "what it is for"] [--live] [--json]`
// Adds an API key for a tenant and prints it ONCE: only its SHA-256 is stored.
// The key is tagged under API_KEY_SECRET, which must be the API's own, or the API refuses the key.
import { InvalidArgumentError } from 'commander';
import { loadConfig } from '../src/config.ts';
import { createPool, withTransaction } from '../src/db/index.ts';
import { hashApiKey, mintApiKey } from '../src/api/auth.ts';
import { insertApiKey, insertTenant, tenantExists } from '../src/tenants/sql.ts';
import { createCommand, runCli } from './lib/cli.ts';

const TENANT_RULE = '1-63 characters of a-z, 0-9, "_" or "-", starting with a letter or digit';

function tenantIdArg(raw: string): string {
  if (!/^[a-z0-9][a-z0-9_-]{0,62}$/.test(raw)) throw new InvalidArgumentError(`must be ${TENANT_RULE}`);
  return raw;
}

const program = createCommand(
  'api-key',
  'Add an API key for a tenant and print it once (only its SHA-256 is stored).',
  { json: true },
)
  .argument('<tenant-id>', TENANT_RULE, tenantIdArg)
  .option('--create-tenant', 'create the tenant if it does not exist')
  .option('--name <name>', "the new tenant's display name (default: the tenant id)")
  .option('--label <label>', 'what the key is for', '')
  .option('--live', 'make a sk_live_ key instead of sk_test_')
  .addHelpText('after', '\nRun as: npm run api-key -- <tenant-id> [options]');

await runCli(program, async (cmd, out) => {
  const tenantId = cmd.processedArgs[0] as string;
  const opts = cmd.opts<{ createTenant?: boolean; name?: string; label: string; live?: boolean }>();
  const config = loadConfig();
  const pool = createPool(config.databaseUrl, { max: 1 });
  try {
    // Read before any write: a refused secret (published, or weak) stops here with its message.
    const secret = config.apiKeySecret;
    const key = mintApiKey(secret, opts.live ? 'live' : 'test');
    const created = await withTransaction(pool, async (tx) => {
      let createdTenant = false;
      if (!(await tenantExists(tx, tenantId))) {
        if (!opts.createTenant) {
          throw Object.assign(
            new Error(`tenant ${JSON.stringify(tenantId)} does not exist; pass --create-tenant to create it`),
            { code: 'tenant_not_found' },
          );
        }
        createdTenant = await insertTenant(tx, { id: tenantId, name: opts.name ?? tenantId });
      }
      await insertApiKey(tx, { keyHash: hashApiKey(key), tenantId, label: opts.label });
      return createdTenant;
    });
    if (created) out.info(`Created tenant ${tenantId}.`, { tenantId, createdTenant: true });
    if (!out.json) out.info(`New API key for tenant ${tenantId} (shown once; only its hash is stored):`);
    out.result({ tenantId, key, createdTenant: created, live: Boolean(opts.live) }, key);
  } finally {
    await pool.end();
  }
});
