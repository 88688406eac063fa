// Per test file (each fork runs several, isolate: false): its own database, the process's logger
// as a new process has it, and the Temporal SDK's own logs kept to errors.
import { afterAll, beforeAll } from 'vitest';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { loadConfig } from '../../src/config.ts';
import { configureLogging } from '../../src/log.ts';
import { beginTestFile, createTestDatabase, dropTestDatabase } from '../support/env.ts';

try {
  Runtime.install({ logger: new DefaultLogger('ERROR') });
} catch {
  // already installed in this process
}

// Our own JSON logs, to stdout and stderr at LOG_LEVEL (vitest.config.ts sets warn): installed
// again for each file, since a file before it in this process may have pointed them elsewhere.
configureLogging({ level: loadConfig().logLevel, pretty: false });

beginTestFile();
// A clone of the run's migrated, seeded template. Registered before the file's own hooks,
// so it exists before them and (hooks after a suite run in reverse) is dropped after them,
// whether the file's tests passed or not.
beforeAll(createTestDatabase);
afterAll(dropTestDatabase);
