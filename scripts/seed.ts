// `npm run seed [-- --json]`: the demo tenants and their published API keys, for local use (loopback only).
import { loadConfig } from '../src/config.ts';
import { createPool } from '../src/db/index.ts';
import { redactUrl } from '../src/db/migrate.ts';
import { seedDemoData } from '../dev/seed.ts';
import { createCommand, runCli } from '../src/cli/command.ts';

const program = createCommand(
  'seed',
  'Add the demo tenants and their published API keys to DATABASE_URL (local use only: refused off loopback).',
  { json: true },
).addHelpText('after', '\nRun as: npm run seed [-- options]');

await runCli(program, async (_cmd, out) => {
  const config = loadConfig();
  const pool = createPool(config.databaseUrl, { max: 1 });
  try {
    const database = redactUrl(config.databaseUrl);
    const added = await seedDemoData(pool, config.exposure);
    out.result(
      { database, added },
      added.length
        ? `Seeded demo keys into ${database}: ${added.join(', ')} (local use only)`
        : `Demo data already present in ${database}.`,
    );
  } finally {
    await pool.end();
  }
});
