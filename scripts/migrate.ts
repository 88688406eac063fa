// `npm run migrate`: create the database if needed and apply pending migrations.
import { loadConfig } from '../src/config.ts';
import { ensureDatabase, migrate, redactUrl } from '../src/db/migrate.ts';

const config = loadConfig();
await ensureDatabase(config.databaseUrl);
const applied = await migrate(config.databaseUrl, (m) => console.warn(m));
console.log(
  applied.length
    ? `Applied ${applied.length} migration(s) to ${redactUrl(config.databaseUrl)}: ${applied.join(', ')}`
    : `Database ${redactUrl(config.databaseUrl)} is up to date.`,
);
