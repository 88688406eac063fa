// Makes sure a Temporal CLI binary exists (builds it from the Go module on first use) and prints its path.
import { loadConfig } from '../src/config.ts';
import { ensureTemporalCli } from '../src/devserver/temporal.ts';

try {
  const cli = await ensureTemporalCli({ toolsDir: loadConfig().toolsDir });
  console.log(cli);
} catch (err) {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
}
