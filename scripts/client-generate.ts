// `npm run client:generate`: writes packages/client/openapi.json (the document the API serves) and
// packages/client/src/schema.d.ts (types generated from it by openapi-typescript). `--check` only compares.
import fs from 'node:fs/promises';
import path from 'node:path';
import { createCommand, runCli } from '../src/cli/command.ts';

const program = createCommand(
  'client:generate',
  'Generate the typed client files from the OpenAPI document the API serves.',
  { json: true },
).option('--check', 'exit 1 if the committed files differ from what would be generated; write nothing');

await runCli(program, async (cmd, out) => {
  const { check } = cmd.opts<{ check?: boolean }>();
  // Loaded once the command line is read: the whole API and the generator, which --help never needs.
  const { OPENAPI_PATH, SCHEMA_PATH, liveOpenApiDocument, renderClientFiles } =
    await import('../dev/codegen.ts');
  const files = await renderClientFiles(await liveOpenApiDocument());
  const targets: [string, string][] = [
    [OPENAPI_PATH, files.openapi],
    [SCHEMA_PATH, files.schema],
  ];
  const stale: string[] = [];
  for (const [file, text] of targets) {
    const current = await fs.readFile(file, 'utf8').catch(() => '');
    if (current === text) continue;
    stale.push(path.relative(process.cwd(), file));
    if (!check) await fs.writeFile(file, text);
  }
  if (check && stale.length) {
    throw Object.assign(new Error(`stale: ${stale.join(', ')}; run npm run client:generate`), {
      code: 'stale',
    });
  }
  out.result(
    { written: check ? [] : stale, upToDate: stale.length === 0 },
    stale.length === 0 ? 'Client files are up to date.' : `Wrote ${stale.join(', ')}.`,
  );
});
