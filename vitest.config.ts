import path from 'node:path';
import { defineConfig } from 'vitest/config';

const core = (file: string) => path.resolve(import.meta.dirname, 'packages/onceflow/src', file);

export default defineConfig({
  // The core package from its sources, as tsconfig.json's paths map it for tsc and tsx.
  resolve: {
    alias: [
      { find: /^onceflow$/, replacement: core('index.ts') },
      { find: /^onceflow\/workflow$/, replacement: core('workflow.ts') },
      { find: /^onceflow\/postgres$/, replacement: core('postgres.ts') },
    ],
  },
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/setup/global.ts'],
    setupFiles: ['test/setup/runtime.ts'],
    // Integration tests share one Temporal dev server; each file gets its own
    // database, cloned from the run's migrated template (test/setup/runtime.ts).
    // Files run in parallel in forks, each with its own pools.
    pool: 'forks',
    maxWorkers: 2,
    testTimeout: 120_000,
    hookTimeout: 180_000,
    teardownTimeout: 60_000,
    reporters: ['default'],
    env: { LOG_LEVEL: 'warn' },
  },
});
