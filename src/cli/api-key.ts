/**
 * `onceflow api-key create|list|revoke` (also `npm run -s api-key -- …`): tenant API keys.
 *
 * - create <tenant-id>: mints a key and prints it ONCE; only its SHA-256 is
 *   stored. The key is tagged under API_KEY_SECRET, which must be the API's
 *   own, or the API refuses the key. `api-key <tenant-id>` (the form before
 *   subcommands) still means create.
 * - list: each key's ID (the first 12 hex digits of its hash), tenant, label,
 *   created and revoked times; never a key or a whole hash.
 * - revoke <id|key>: the API refuses the key from its next request on. Not in
 *   the audit log: its `action` column admits only the recovery actions
 *   (reconcile, resolve, redrive); `revoked_at` records when.
 */
import { Command, InvalidArgumentError } from 'commander';
import { loadConfig } from '../config.ts';
import { createPool, withTransaction } from '../db/index.ts';
import { hashApiKey, mintApiKey } from '../api/auth.ts';
import {
  API_KEY_ID_LENGTH,
  insertApiKey,
  insertTenant,
  listApiKeys,
  revokeApiKey,
  tenantExists,
} from '../tenants/sql.ts';
import { createCommand, positiveInt, runCli, type CliOutput } from './command.ts';

const TENANT_RULE = '1-63 characters of a-z, 0-9, "_" or "-", starting with a letter or digit';
const SUBCOMMANDS = ['create', 'list', 'revoke'];

function tenantIdArg(raw: string): string {
  if (!/^[a-z0-9][a-z0-9_-]{0,62}$/.test(raw)) throw new InvalidArgumentError(`must be ${TENANT_RULE}`);
  return raw;
}

/** A key ID (8 to 64 hex digits of its hash) or the key itself, as the hash prefix to look up. */
function keyIdArg(raw: string): string {
  if (/^sk_(test|live)_/.test(raw)) return hashApiKey(raw);
  if (/^[0-9a-f]{8,64}$/.test(raw)) return raw;
  throw new InvalidArgumentError(
    `must be a key ID from \`api-key list\` (at least 8 hex digits of its ${API_KEY_ID_LENGTH}) or the key itself`,
  );
}

let chosen: { name: string; cmd: Command } | undefined;
const pick =
  (name: string) =>
  (...received: unknown[]) => {
    chosen = { name, cmd: received.at(-1) as Command };
  };

const program = createCommand('api-key', 'Tenant API keys: create (printed once), list, revoke.', {
  json: true,
})
  .usage('<command> [options]   (onceflow api-key <command>, or npm run -s api-key -- <command>)')
  .addHelpText(
    'after',
    '\n`api-key <tenant-id> [options]` still means `api-key create <tenant-id> [options]`.',
  );

program
  .command('create')
  .description('Add an API key for a tenant and print it once (only its SHA-256 is stored)')
  .helpOption('-h, --help', 'show this help')
  .option('--json', 'write every output, errors included, as JSON lines')
  .argument('<tenant-id>', TENANT_RULE, tenantIdArg)
  .option('--create-tenant', 'create the tenant if it does not exist')
  .option('--name <name>', "the new tenant's display name (default: the tenant id)")
  .option('--label <label>', 'what the key is for', '')
  .option('--live', 'make a sk_live_ key instead of sk_test_')
  .action(pick('create'));

program
  .command('list')
  .description('Keys, newest first: ID, tenant, label, created, revoked (never the key)')
  .helpOption('-h, --help', 'show this help')
  .option('--json', 'write every output, errors included, as JSON lines')
  .option('--tenant <tenant-id>', 'only this tenant', tenantIdArg)
  .option('--limit <n>', 'at most n keys', positiveInt, 100)
  .action(pick('list'));

program
  .command('revoke')
  .description('Revoke a key: the API refuses it from its next request on')
  .helpOption('-h, --help', 'show this help')
  .option('--json', 'write every output, errors included, as JSON lines')
  .argument('<id>', 'the key ID from `api-key list` (or a longer prefix of it), or the key itself', keyIdArg)
  .action(pick('revoke'));

// The form before subcommands: a bare tenant ID means create.
const argv = [...process.argv];
const first = argv[2];
if (first !== undefined && !first.startsWith('-') && !SUBCOMMANDS.includes(first))
  argv.splice(2, 0, 'create');

function failure(code: string, message: string): Error {
  return Object.assign(new Error(message), { code });
}

const iso = (d: Date | null) => (d ? d.toISOString() : '-');

async function create(cmd: Command, out: CliOutput): Promise<void> {
  const tenantId = cmd.processedArgs[0] as string;
  const opts = cmd.opts<{ createTenant?: boolean; name?: string; label: string; live?: boolean }>();
  const config = loadConfig();
  const pool = createPool(config.databaseUrl, { max: 1 });
  try {
    // Read before any write: a refused secret (published, or weak) stops here with its message.
    const secret = config.apiKeySecret;
    const key = mintApiKey(secret, opts.live ? 'live' : 'test');
    const keyHash = hashApiKey(key);
    const created = await withTransaction(pool, async (tx) => {
      let createdTenant = false;
      if (!(await tenantExists(tx, tenantId))) {
        if (!opts.createTenant) {
          throw failure(
            'tenant_not_found',
            `tenant ${JSON.stringify(tenantId)} does not exist; pass --create-tenant to create it`,
          );
        }
        createdTenant = await insertTenant(tx, { id: tenantId, name: opts.name ?? tenantId });
      }
      await insertApiKey(tx, { keyHash, tenantId, label: opts.label });
      return createdTenant;
    });
    const id = keyHash.slice(0, API_KEY_ID_LENGTH);
    if (created) out.info(`Created tenant ${tenantId}.`, { tenantId, createdTenant: true });
    if (!out.json)
      out.info(
        `New API key ${id} for tenant ${tenantId} (shown once; only its hash is stored; ` +
          `revoke it with: onceflow api-key revoke ${id}):`,
      );
    out.result({ id, tenantId, key, createdTenant: created, live: Boolean(opts.live) }, key);
  } finally {
    await pool.end();
  }
}

async function list(cmd: Command, out: CliOutput): Promise<void> {
  const opts = cmd.opts<{ tenant?: string; limit: number }>();
  const pool = createPool(loadConfig().databaseUrl, { max: 1 });
  try {
    const rows = await listApiKeys(pool, { tenantId: opts.tenant, limit: opts.limit });
    const text =
      rows.length === 0
        ? '(none)'
        : [
            ['id', 'tenant', 'state', 'created', 'revoked', 'label'],
            ...rows.map((r) => [
              r.id,
              r.tenantId,
              r.revokedAt ? 'revoked' : 'active',
              iso(r.createdAt),
              iso(r.revokedAt),
              r.label,
            ]),
          ]
            .map((cells) => cells.join('\t'))
            .join('\n');
    out.result(
      rows.map((r) => ({ ...r, state: r.revokedAt ? 'revoked' : 'active' })),
      text,
    );
  } finally {
    await pool.end();
  }
}

async function revoke(cmd: Command, out: CliOutput): Promise<void> {
  const prefix = cmd.processedArgs[0] as string;
  const pool = createPool(loadConfig().databaseUrl, { max: 1 });
  try {
    const r = await revokeApiKey(pool, prefix);
    if (r.found === 'none')
      throw failure('not_found', `no API key with ID ${prefix.slice(0, API_KEY_ID_LENGTH)}`);
    if (r.found === 'ambiguous')
      throw failure('ambiguous', `more than one key's ID starts with ${prefix}; give more digits`);
    out.result(
      { ...r.row, revoked: r.revoked },
      r.revoked
        ? `API key ${r.row.id} (tenant ${r.row.tenantId}) revoked; the API refuses it from now on`
        : `API key ${r.row.id} (tenant ${r.row.tenantId}) was already revoked at ${iso(r.row.revokedAt)}`,
    );
  } finally {
    await pool.end();
  }
}

await runCli(
  program,
  async (_program, out) => {
    if (!chosen) throw new Error('api-key: no command was chosen'); // commander refuses that as a usage error first
    const run = { create, list, revoke }[chosen.name as 'create' | 'list' | 'revoke'];
    await run(chosen.cmd, out);
  },
  argv,
);
