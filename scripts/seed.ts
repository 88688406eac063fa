// `npm run seed`: the demo tenants and their published API keys, for local use (loopback only).
import { loadConfig } from '../src/config.ts';
import { createPool } from '../src/db/index.ts';
import { redactUrl } from '../src/db/migrate.ts';
import { seedDemoData } from '../src/db/seed.ts';

const config = loadConfig();
const pool = createPool(config.databaseUrl, { max: 1 });
try {
  const added = await seedDemoData(pool, config.bindHost);
  console.log(
    added.length
      ? `Seeded demo keys into ${redactUrl(config.databaseUrl)}: ${added.join(', ')} (local use only)`
      : `Demo data already present in ${redactUrl(config.databaseUrl)}.`,
  );
} catch (err) {
  console.error(err instanceof Error ? err.message : String(err));
  process.exitCode = 1;
} finally {
  await pool.end();
}
