// `npm run temporal:ensure [-- --json]`: makes sure a Temporal CLI binary exists (builds it from
// the Go module on first use) and prints its path.
import { loadConfig } from '../src/config.ts';
import { ensureTemporalCli } from '../src/devserver/temporal.ts';
import { createCommand, runCli } from './lib/cli.ts';

const program = createCommand(
  'temporal:ensure',
  'Make sure a Temporal CLI binary exists (TEMPORAL_CLI_PATH, or built into .tools/ on first use) and print its path.',
  { json: true },
).addHelpText('after', '\nRun as: npm run temporal:ensure [-- options]');

await runCli(program, async (_cmd, out) => {
  const cli = await ensureTemporalCli({ toolsDir: loadConfig().toolsDir });
  out.result({ path: cli }, cli);
});
