/** A pino destination that keeps the lines in memory, parsed. */
import { Writable } from 'node:stream';

export interface Captured {
  stream: Writable;
  text: () => string;
  lines: () => Record<string, unknown>[];
}

export function captureLines(): Captured {
  let text = '';
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      text += chunk.toString();
      done();
    },
  });
  return {
    stream,
    text: () => text,
    lines: () =>
      text
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, unknown>),
  };
}
