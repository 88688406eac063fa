import path from 'node:path';
import { defineConfig } from 'vitest/config';

const core = (file: string) => path.resolve(import.meta.dirname, 'packages/onceflow/src', file);

/**
 * The fast tier: in-process tests that need Postgres and nothing else (no Temporal server, Go,
 * SPIN or Chromium, and no child processes, which cost seconds each). A test here that starts a
 * worker or a client of Temporal finds no server address and fails: it belongs to the other tier.
 */
const UNIT = [
  'test/activities/*.test.ts',
  'test/merchant-events/url-policy.test.ts',
  'test/api/{failure-throttle,openapi,webhook-charge-wait}.test.ts',
  'test/bench/cpu-meter.test.ts',
  'test/chaos/invariants.test.ts',
  'test/client/{generated,retry,webhooks}.test.ts',
  'test/config/{api-key-secret,env,providers,worker-versioning}.test.ts',
  'test/db/*.test.ts',
  'test/deploy/{compose,dockerfile,metrics-exposure}.test.ts',
  'test/log/*.test.ts',
  'test/metrics/metrics.test.ts',
  'test/operator/preview.test.ts',
  'test/orders/{public-reason,searchable-text,step-keys}.test.ts',
  'test/process/{ports,resources,supervisor}.test.ts',
  'test/providers/*.test.ts',
  'test/retention/retention-tables.test.ts',
  'test/sandbox/*.test.ts',
  'test/steps/*.test.ts',
  'test/worker/{health,smoke-registration}.test.ts',
];

/**
 * TEST_FORKS, 3 by default: the integration files wait on child processes and Temporal's timers
 * part of the time, so three forks keep two cores busier than two (docs/BENCHMARKS.md, "What the
 * test suite spends"); scripts/test-rerun.sh, whose files wait more, runs six.
 */
function forks(): number {
  const value = process.env.TEST_FORKS ?? '3';
  if (!/^[1-9][0-9]*$/.test(value))
    throw new Error(`TEST_FORKS must be a positive integer, not ${JSON.stringify(value)}`);
  return Number(value);
}

export default defineConfig({
  // The core package from its sources, as tsconfig.json's paths map it for tsc and tsx.
  resolve: {
    alias: [
      { find: /^onceflow$/, replacement: core('index.ts') },
      { find: /^onceflow\/workflow$/, replacement: core('workflow.ts') },
      { find: /^onceflow\/postgres$/, replacement: core('postgres.ts') },
      {
        find: /^@onceflow\/client$/,
        replacement: path.resolve(import.meta.dirname, 'packages/client/src/index.ts'),
      },
    ],
  },
  test: {
    setupFiles: ['test/setup/runtime.ts'],
    // Each test file gets its own database, cloned from the run's migrated template
    // (test/setup/runtime.ts). Files run in parallel in forks, each with its own pools.
    pool: 'forks',
    maxWorkers: forks(),
    // Each fork runs file after file with one module cache, instead of a new process importing the
    // SDK, Fastify and the app again per file (docs/BENCHMARKS.md, "What the test suite spends").
    // What must be per file is set up by test/setup/runtime.ts, which runs before each file.
    isolate: false,
    testTimeout: 120_000,
    hookTimeout: 180_000,
    teardownTimeout: 60_000,
    reporters: ['default'],
    env: { LOG_LEVEL: 'warn' },
    // Two tiers, one command: `npm test` runs both, `npm run test:unit` the first alone.
    projects: [
      {
        extends: true,
        test: { name: 'unit', include: UNIT, globalSetup: ['test/setup/global-unit.ts'] },
      },
      {
        extends: true,
        test: {
          name: 'integration',
          include: ['test/**/*.test.ts'],
          exclude: UNIT,
          globalSetup: ['test/setup/global.ts'],
        },
      },
    ],
  },
});
