import fs from 'node:fs';
import { chromium, type Browser } from 'playwright-core';

/** Debian's Chromium; `npm test` installs it when missing. CHROMIUM_PATH overrides. */
function chromiumPath(): string {
  const candidates = [
    process.env.CHROMIUM_PATH,
    '/usr/bin/chromium',
    '/usr/bin/chromium-browser',
    '/Applications/Chromium.app/Contents/MacOS/Chromium', // brew install --cask chromium
  ].filter((p): p is string => Boolean(p));
  const found = candidates.find((p) => fs.existsSync(p));
  if (!found) {
    throw new Error(
      `No Chromium found (looked at ${candidates.join(', ')}). Install it (Debian: sudo apt-get install chromium; ` +
        'macOS: brew install --cask chromium) or set CHROMIUM_PATH; `npm test` does this itself as root on Debian.',
    );
  }
  return found;
}

/** Headless Debian Chromium with no background networking (this machine reaches no outside host). */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: chromiumPath(),
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--no-first-run',
    ],
  });
}
