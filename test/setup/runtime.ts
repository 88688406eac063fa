// Per test process: keep the Temporal SDK's own logs to errors (expected activity failures are warnings).
import { DefaultLogger, Runtime } from '@temporalio/worker';

try {
  Runtime.install({ logger: new DefaultLogger('ERROR') });
} catch {
  // already installed in this process
}
