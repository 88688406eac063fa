/**
 * Composition root of the sandbox provider process:
 * config -> Postgres pool -> HTTP app (+ webhook dispatcher). SIGTERM/SIGINT
 * close them in reverse order.
 */
import { loadConfig } from '../config.ts';
import { createPool } from '../db/index.ts';
import { redactUrl } from '../db/migrate.ts';
import { errorFields, log, setLogLevel } from '../log.ts';
import { startSandbox } from './server.ts';
import { startTracing } from '../tracing/index.ts';

async function main(): Promise<void> {
  const config = loadConfig();
  setLogLevel(config.logLevel);
  // Tracing (OTEL_EXPORTER_OTLP_ENDPOINT; a no-op when unset): before the app, which reads it.
  const tracing = await startTracing(config.tracing, 'sandbox');
  const pool = createPool(config.databaseUrl);
  try {
    const { rows } = await pool.query<{ t: string | null }>(
      `select to_regclass('sandbox.charges')::text as t`,
    );
    if (!rows[0]?.t) {
      throw new Error(
        `The sandbox tables are missing in ${redactUrl(config.databaseUrl)}. Run \`npm run migrate\` first.`,
      );
    }
  } catch (err) {
    await pool.end();
    throw err;
  }

  let sandbox;
  try {
    sandbox = await startSandbox({
      pool,
      port: config.ports.sandbox,
      host: config.bindHost,
      webhook: { url: config.webhookUrl, secret: config.webhookSecret },
    });
  } catch (err) {
    await pool.end();
    throw err;
  }
  log.info('sandbox listening', { url: sandbox.url, webhookUrl: config.webhookUrl });

  let closing = false;
  const shutdown = async (signal: string) => {
    if (closing) return;
    closing = true;
    log.info('sandbox shutting down', { signal });
    try {
      await sandbox.close();
      await pool.end();
      await tracing.shutdown();
      process.exit(0);
    } catch (err) {
      log.error('sandbox shutdown failed', errorFields(err));
      process.exit(1);
    }
  };
  process.once('SIGTERM', () => void shutdown('SIGTERM'));
  process.once('SIGINT', () => void shutdown('SIGINT'));
}

main().catch((err: unknown) => {
  log.error('sandbox failed to start', errorFields(err));
  process.exit(1);
});
