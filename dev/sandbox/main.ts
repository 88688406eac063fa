/**
 * Composition root of the sandbox provider process:
 * config -> Postgres pool and the sandbox's schema -> HTTP app (+ webhook dispatcher). Closed in
 * reverse order on every exit path (src/process/run.ts).
 */
import { loadConfig } from '../../src/config.ts';
import { configureLogging, log } from '../../src/log.ts';
import { runProcess, untilAborted } from '../../src/process/run.ts';
import { openPool } from '../../src/process/wiring.ts';
import { applySandboxMigrations } from './migrate.ts';
import { startSandbox } from './server.ts';
import { startTracing } from '../../src/tracing/index.ts';
import { sandboxTuning } from './tuning.ts';

await runProcess('sandbox', async ({ resources, stopping, started }) => {
  const config = loadConfig();
  configureLogging({ level: config.logLevel, pretty: config.logPretty, service: 'sandbox' });
  // Tracing (OTEL_EXPORTER_OTLP_ENDPOINT; a no-op when unset): before the app, which reads it.
  resources.add('tracing', await startTracing(config.tracing, 'sandbox'), (t) => t.shutdown());
  const pool = openPool(resources, config, { applicationName: 'onceflow-sandbox' });
  // The sandbox's own schema (dev/sandbox/migrations/), not the product's chain: created or
  // brought up to date here, so a database that `npm run migrate` prepared is enough.
  const applied = await applySandboxMigrations(config.databaseUrl, (m) => log.warn(m));
  if (applied.length) log.info('sandbox migrations applied', { applied });
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
