// `npm run temporal:ensure [-- --json]`: makes sure a Temporal CLI binary exists (builds it from
// the Go module on first use) and prints its path. With TEMPORAL_BACKEND=postgres it also makes
// sure the Temporal server, its SQL tool and the UI server exist (built on first use).
import { loadConfig } from '../src/config.ts';
import { ensureTemporalCli } from '../dev/devserver/temporal.ts';
import { ensureTemporalServerTools } from '../dev/devserver/temporal-server.ts';
import { createCommand, runCli } from '../src/cli/command.ts';

const program = createCommand(
  'temporal:ensure',
  'Make sure a Temporal CLI binary exists (TEMPORAL_CLI_PATH, or built into .tools/ on first use) and print its path; with TEMPORAL_BACKEND=postgres also the Temporal server, its SQL tool and the UI server.',
  { json: true },
).addHelpText('after', '\nRun as: npm run temporal:ensure [-- options]');

await runCli(program, async (_cmd, out) => {
  const config = loadConfig();
  const cli = await ensureTemporalCli({ toolsDir: config.toolsDir });
  if (config.temporal.backend !== 'postgres') {
    out.result({ path: cli }, cli);
    return;
  }
  const server = await ensureTemporalServerTools({ toolsDir: config.toolsDir });
  out.result({ path: cli, server }, [cli, server.server, server.sqlTool, server.uiServer].join('\n'));
});
