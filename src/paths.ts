/**
 * Where the running code and the package are, the same way from the sources
 * (src/…/x.ts through tsx) and from the compiled build (dist/app/src/…/x.js,
 * what the image runs): files that are not code (package.json, migrations/,
 * the workflow bundle) are found from the package root, never by counting
 * `..` from a module, which differs between the two layouts.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The directory holding src/, workflows/ and activities/: the repo from the sources, dist/app compiled. */
export const CODE_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** `.ts` when running from the sources, `.js` when compiled: the extension of sibling entry files. */
export const CODE_EXT = import.meta.url.endsWith('.ts') ? '.ts' : '.js';

/** The nearest directory above the code with a package.json (the repo, or /app in the image). */
export const PACKAGE_ROOT = ((): string => {
  let dir = CODE_ROOT;
  while (!fs.existsSync(path.join(dir, 'package.json'))) {
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error(`onceflow: no package.json above ${CODE_ROOT}`);
    dir = parent;
  }
  return dir;
})();
