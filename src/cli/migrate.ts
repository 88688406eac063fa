// `npm run migrate [-- --json]`: create the database if needed and apply pending migrations.
import { loadConfig } from '../config.ts';
import { ensureDatabase, migrate, redactUrl } from '../db/migrate.ts';
import { createCommand, runCli } from './command.ts';

const program = createCommand(
  'migrate',
  'Create the database (DATABASE_URL) if needed and apply pending migrations.',
  { json: true },
).addHelpText('after', '\nRun as: npm run migrate [-- options]');

await runCli(program, async (_cmd, out) => {
  const config = loadConfig();
  const database = redactUrl(config.databaseUrl);
  await ensureDatabase(config.databaseUrl);
  const applied = await migrate(config.databaseUrl, (m) => out.info(m));
  out.result(
    { database, applied },
    applied.length
      ? `Applied ${applied.length} migration(s) to ${database}: ${applied.join(', ')}`
      : `Database ${database} is up to date.`,
  );
});
