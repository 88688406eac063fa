import { defineConfig } from 'vitest/config';

// The package's own suite: its sources, a Postgres server and, for one test, a
// local Temporal CLI (TEMPORAL_CLI_PATH or the repo's .tools/bin/temporal). Nothing of the app.
export default defineConfig({
  // The package, wherever the run was started from.
  root: import.meta.dirname,
  test: {
    include: ['test/**/*.test.ts'],
    // One migrated throwaway database for the run (test/setup/global.ts); files keep apart by unique scopes.
    globalSetup: ['test/setup/global.ts'],
    pool: 'forks',
    maxWorkers: 2,
    testTimeout: 120_000,
    hookTimeout: 180_000,
    teardownTimeout: 60_000,
    reporters: ['default'],
  },
});
