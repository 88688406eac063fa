/**
 * Structured logs through pino: a message plus fields, one JSON object per line. Never log SQL
 * parameters, payloads or secrets; the redact paths are the safety net, not the policy.
 * One logger per process (`configureLogging`), shared with Fastify and the Temporal SDK so every
 * line has one format; a line inside a trace span carries its `trace_id` and `span_id`.
 */
import { createRequire } from 'node:module';
import { pino, stdTimeFunctions, type DestinationStream, type Logger } from 'pino';
import type PinoPretty from 'pino-pretty';
import type { LogLevel as SdkLogLevel, LogMetadata, Logger as SdkLogger } from '@temporalio/common';
import { isSpanContextValid, trace } from '@opentelemetry/api';

export type { Logger };
export type LogLevel = 'debug' | 'info' | 'warn' | 'error';
export type Fields = Record<string, unknown>;

/** Credentials, secrets and signature headers; `*` matches one level, so nested `headers` are covered. */
const REDACT_PATHS = [
  'authorization',
  'apiKey',
  'adminToken',
  'webhookSecret',
  'secret',
  'signature',
  'password',
  'headers.authorization',
  'headers["onceflow-signature"]',
  'headers["x-api-key"]',
  'headers.cookie',
  '*.authorization',
  '*.apiKey',
  '*.adminToken',
  '*.webhookSecret',
  '*.secret',
  '*.signature',
  '*.password',
  '*.headers.authorization',
  '*.headers["onceflow-signature"]',
  '*.headers["x-api-key"]',
  '*.headers.cookie',
];
const REDACTED = '[redacted]';

export interface LoggingOptions {
  level?: LogLevel;
  /** Human-readable lines (pino-pretty) instead of JSON; undefined: pretty when stdout is a TTY. */
  pretty?: boolean | undefined;
  /** The process's name, on every JSON line as `service`. */
  service?: string;
  /** Where lines go instead of stdout/stderr (tests capture them this way). */
  destination?: DestinationStream;
  /** Every line to stderr: a CLI whose stdout is its output (the ops CLI's --json) must not get log lines there. */
  stderrOnly?: boolean;
}

/** Loaded only for the human mode: JSON processes (CI, containers, the ops CLI) skip its start-up cost. */
function loadPretty(): typeof PinoPretty {
  return createRequire(import.meta.url)('pino-pretty') as typeof PinoPretty;
}

function streams(usePretty: boolean, stderrOnly: boolean): DestinationStream {
  const pretty = usePretty ? loadPretty() : undefined;
  const out = (fd: 1 | 2): DestinationStream =>
    pretty
      ? pretty({
          destination: fd,
          sync: true,
          colorize: fd === 1 ? process.stdout.isTTY : process.stderr.isTTY,
          singleLine: true,
          ignore: 'pid,hostname,service',
          translateTime: 'SYS:HH:MM:ss.l',
        })
      : pino.destination({ dest: fd, sync: true });
  if (stderrOnly) return out(2);
  // dedupe: a line goes to the stream with the highest level it reaches, so warn/error only to stderr.
  return pino.multistream(
    [
      { level: 'trace', stream: out(1) },
      { level: 'warn', stream: out(2) },
    ],
    { dedupe: true },
  );
}

/** The active span's IDs as log fields (W3C hex), or nothing outside a span. */
function traceFields(): Fields {
  const span = trace.getActiveSpan();
  if (!span) return {};
  const ctx = span.spanContext();
  return isSpanContextValid(ctx) ? { trace_id: ctx.traceId, span_id: ctx.spanId } : {};
}

/** A pino logger with our format and redaction; `configureLogging` installs one as the process's. */
export function createLogger(opts: LoggingOptions = {}): Logger {
  const tty = opts.stderrOnly ? process.stderr.isTTY : process.stdout.isTTY;
  const usePretty = opts.destination ? false : (opts.pretty ?? tty === true);
  return pino(
    {
      level: opts.level ?? 'info',
      base: opts.service ? { service: opts.service } : {},
      timestamp: stdTimeFunctions.isoTime,
      // JSON lines say "level":"info"; pino-pretty wants the numbers to colour them.
      ...(usePretty ? {} : { formatters: { level: (label: string) => ({ level: label }) } }),
      redact: { paths: REDACT_PATHS, censor: REDACTED },
      mixin: traceFields,
    },
    opts.destination ?? streams(usePretty, opts.stderrOnly === true),
  );
}

let root: Logger = createLogger({ pretty: false });

/** Installs the process's logger (each composition root, once, before it logs). */
export function configureLogging(opts: LoggingOptions): Logger {
  root = createLogger(opts);
  return root;
}

/** The process's pino logger: Fastify's `loggerInstance`, and the parent of child loggers. */
export function rootLogger(): Logger {
  return root;
}

/** Only the level; the destination stays. */
export function setLogLevel(level: LogLevel): void {
  root.level = level;
}

export interface Log {
  debug(msg: string, fields?: Fields): void;
  info(msg: string, fields?: Fields): void;
  warn(msg: string, fields?: Fields): void;
  error(msg: string, fields?: Fields): void;
}

function facade(target: () => Logger): Log {
  return {
    debug: (msg, fields) => target().debug(fields ?? {}, msg),
    info: (msg, fields) => target().info(fields ?? {}, msg),
    warn: (msg, fields) => target().warn(fields ?? {}, msg),
    error: (msg, fields) => target().error(fields ?? {}, msg),
  };
}

/** `log.info(msg, fields)`: the call shape used across src/. Writes to the configured logger. */
export const log: Log = facade(() => root);

/** A logger that adds `bindings` to every line (e.g. an activity's workflow ID and operation key). */
export function childLog(bindings: Fields): Log {
  const child = root.child(bindings);
  return facade(() => child);
}

export function errorFields(err: unknown): Fields {
  if (err instanceof Error) return { error: err.message, errorName: err.name };
  return { error: String(err) };
}

const SDK_LEVELS: Record<SdkLogLevel, 'trace' | 'debug' | 'info' | 'warn' | 'error'> = {
  TRACE: 'trace',
  DEBUG: 'debug',
  INFO: 'info',
  WARN: 'warn',
  ERROR: 'error',
};

/** Errors in the SDK's metadata become fields JSON can show (pino would print `{}` for them). */
function sdkFields(meta: LogMetadata | undefined): Fields {
  const fields: Fields = { component: 'temporal-sdk' };
  if (!meta) return fields;
  for (const [k, v] of Object.entries(meta)) {
    if (v instanceof Error) Object.assign(fields, errorFields(v));
    else if (typeof v === 'bigint') fields[k] = v.toString();
    else fields[k] = v;
  }
  return fields;
}

/** The Temporal SDK's Logger on pino, read at each call so it follows `configureLogging`. */
export function temporalSdkLogger(target: () => Logger = rootLogger): SdkLogger {
  const write = (level: SdkLogLevel, message: string, meta?: LogMetadata) =>
    target()[SDK_LEVELS[level] ?? 'info'](sdkFields(meta), message);
  return {
    log: write,
    trace: (message, meta) => write('TRACE', message, meta),
    debug: (message, meta) => write('DEBUG', message, meta),
    info: (message, meta) => write('INFO', message, meta),
    warn: (message, meta) => write('WARN', message, meta),
    error: (message, meta) => write('ERROR', message, meta),
  };
}
