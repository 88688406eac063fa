/**
 * The resource stack every composition root builds on: each dependency is
 * registered with its close function as soon as it exists, and `closeAll`
 * closes them in reverse order. So a start-up that fails half-way closes
 * exactly what it had opened (a pool, a metrics server, a connection), and a
 * shutdown closes the HTTP server before the pool it uses.
 */
import { errorFields, log } from '../log.ts';

interface Entry {
  name: string;
  close: () => unknown;
}

export class Resources {
  private readonly stack: Entry[] = [];
  private closing: Promise<boolean> | undefined;

  /** Registers `resource` (already open) and returns it; `close` runs once, in `closeAll`. */
  add<T>(name: string, resource: T, close: (resource: T) => unknown): T {
    if (this.closing) throw new Error(`cannot add ${name}: the resources are closing`);
    this.stack.push({ name, close: () => close(resource) });
    return resource;
  }

  /** Registered names, in opening order. */
  names(): string[] {
    return this.stack.map((e) => e.name);
  }

  /**
   * Closes everything in reverse order. A failing close is logged and the
   * rest still close. Resolves to true when every close succeeded; a second
   * call waits for the first.
   */
  closeAll(): Promise<boolean> {
    this.closing ??= (async () => {
      let ok = true;
      for (const entry of this.stack.reverse()) {
        try {
          await entry.close();
          log.debug('closed', { resource: entry.name });
        } catch (err) {
          ok = false;
          log.error('close failed', { resource: entry.name, ...errorFields(err) });
        }
      }
      this.stack.length = 0;
      return ok;
    })();
    return this.closing;
  }
}
