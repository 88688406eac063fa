// Per test process: keep the Temporal SDK's own logs to errors (expected activity failures are warnings).
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { loadConfig } from '../../src/config.ts';
import { setLogLevel } from '../../src/log.ts';

try {
  Runtime.install({ logger: new DefaultLogger('ERROR') });
} catch {
  // already installed in this process
}

// Our own JSON logs follow LOG_LEVEL (vitest.config.ts sets warn).
setLogLevel(loadConfig().logLevel);
