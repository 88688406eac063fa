/**
 * `npm run build`: bundles the workflow code ahead of time into
 * dist/workflow-bundle/ (git-ignored), so a worker starts polling in
 * seconds instead of bundling for ~12 s. Workers rebuild it themselves
 * when the workflow code changed since (see src/worker/bundle.ts); this
 * step only moves that cost to build time (the Dockerfile runs it).
 */
import path from 'node:path';
import { ensureWorkflowBundle } from '../worker/bundle.ts';

// Both variants: a worker uses the traced one only when tracing is on (OTEL_EXPORTER_OTLP_ENDPOINT).
for (const traced of [false, true]) {
  const started = Date.now();
  const bundle = await ensureWorkflowBundle({ traced, log: (line) => console.log(`[build] ${line}`) });
  console.log(
    `[build] workflow bundle${traced ? ' (with tracing)' : ''} ${bundle.built ? 'built' : 'up to date'}: ` +
      `${path.relative(process.cwd(), bundle.path)} (${((Date.now() - started) / 1000).toFixed(1)} s)`,
  );
}
