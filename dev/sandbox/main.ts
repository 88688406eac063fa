/**
 * Composition root of the sandbox provider process:
 * config -> Postgres pool -> HTTP app (+ webhook dispatcher). Closed in
 * reverse order on every exit path (src/process/run.ts).
 */
import { loadConfig } from '../../src/config.ts';
import { redactUrl } from '../../src/db/migrate.ts';
import { configureLogging, log } from '../../src/log.ts';
import { runProcess, untilAborted } from '../../src/process/run.ts';
import { openPool } from '../../src/process/wiring.ts';
import { startSandbox } from './server.ts';
import { startTracing } from '../../src/tracing/index.ts';
import { sandboxTuning } from './tuning.ts';

await runProcess('sandbox', async ({ resources, stopping, started }) => {
  const config = loadConfig();
  configureLogging({ level: config.logLevel, pretty: config.logPretty, service: 'sandbox' });
  // Tracing (OTEL_EXPORTER_OTLP_ENDPOINT; a no-op when unset): before the app, which reads it.
  resources.add('tracing', await startTracing(config.tracing, 'sandbox'), (t) => t.shutdown());
  const pool = openPool(resources, config, { applicationName: 'onceflow-sandbox' });
  const { rows } = await pool.query<{ t: string | null }>(`select to_regclass('sandbox.charges')::text as t`);
  if (!rows[0]?.t) {
    throw new Error(
      `The sandbox tables are missing in ${redactUrl(config.databaseUrl)}. Run \`npm run migrate\` first.`,
    );
  }
  const sandbox = resources.add(
    'http server',
    await startSandbox({
      pool,
      port: config.ports.sandbox,
      host: config.bindHost,
      webhook: { url: config.webhookUrl, secret: config.webhookSecret },
      ...sandboxTuning(process.env),
    }),
    (s) => s.close(),
  );
  started();
  log.info('sandbox listening', { url: sandbox.url, webhookUrl: config.webhookUrl });
  await untilAborted(stopping);
});
