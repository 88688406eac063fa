/**
 * Every process's metrics listener, never on the API port (the figures span every tenant). GET
 * /metrics appends merged sources (the SDK's endpoint), so one scrape target covers the process.
 */
import http from 'node:http';
import { Gauge, type Registry } from 'prom-client';
import { PortInUseError } from '../process/ports.ts';
import { errorFields, log } from '../log.ts';

export interface MetricsServerOptions {
  registry: Registry;
  port: number;
  host?: string;
  /** Prometheus endpoints appended to ours; names must not collide (the SDK's are `temporal_*`). */
  merge?: string[];
  /** Per merged source, per scrape. Default 2 000 ms. */
  mergeTimeoutMs?: number;
  /** Renders our part of a scrape; default `registry.metrics()`. */
  collect?: () => Promise<string>;
  /** Names the port in the error when it is taken, e.g. 'API metrics (API_METRICS_PORT)'. */
  what?: string;
  /** Serves GET /healthz and GET /readyz (200 when this check passes, else 503). */
  readiness?: () => Promise<{ ready: boolean; checks: Record<string, string> }>;
}

export interface MetricsServer {
  url: string;
  port: number;
  close(): Promise<void>;
}

async function fetchSource(url: string, timeoutMs: number): Promise<string> {
  const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
  if (!res.ok) throw new Error(`HTTP ${res.status}`);
  return res.text();
}

export async function startMetricsServer(opts: MetricsServerOptions): Promise<MetricsServer> {
  const host = opts.host ?? '127.0.0.1';
  const merge = opts.merge ?? [];
  const timeoutMs = opts.mergeTimeoutMs ?? 2_000;
  const existing = opts.registry.getSingleMetric('onceflow_metrics_source_up');
  const sourceUp =
    merge.length === 0
      ? undefined
      : ((existing as Gauge<'source'> | undefined) ??
        new Gauge({
          name: 'onceflow_metrics_source_up',
          help: '1 if a merged metrics source (e.g. the Temporal SDK exporter) answered on the last scrape.',
          labelNames: ['source'] as const,
          registers: [opts.registry],
        }));

  const render = async (): Promise<string> => {
    // Fetch the merged sources first so source_up describes this very scrape.
    const texts = await Promise.all(
      merge.map(async (url) => {
        try {
          const text = await fetchSource(url, timeoutMs);
          sourceUp?.set({ source: url }, 1);
          return text;
        } catch (err) {
          sourceUp?.set({ source: url }, 0);
          log.warn('metrics: merged source failed', { source: url, ...errorFields(err) });
          return '';
        }
      }),
    );
    const own = await (opts.collect ? opts.collect() : opts.registry.metrics());
    return [own, ...texts.map((t) => (t === '' || t.endsWith('\n') ? t : `${t}\n`))].join('');
  };

  const server = http.createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    const readiness = opts.readiness;
    if (readiness && req.method === 'GET' && (path === '/healthz' || path === '/readyz')) {
      const json = (status: number, body: unknown) =>
        res.writeHead(status, { 'content-type': 'application/json' }).end(`${JSON.stringify(body)}\n`);
      if (path === '/healthz') {
        json(200, { status: 'ok' });
        return;
      }
      readiness().then(
        (r) => json(r.ready ? 200 : 503, { status: r.ready ? 'ready' : 'not_ready', checks: r.checks }),
        (err: unknown) =>
          json(503, { status: 'not_ready', error: err instanceof Error ? err.message : String(err) }),
      );
      return;
    }
    if (req.method !== 'GET' || (path !== '/metrics' && path !== '/')) {
      res.writeHead(path === '/metrics' ? 405 : 404, { 'content-type': 'text/plain' }).end('not found\n');
      return;
    }
    render().then(
      (body) => res.writeHead(200, { 'content-type': opts.registry.contentType }).end(body),
      (err: unknown) => {
        log.error('metrics: render failed', errorFields(err));
        res.writeHead(500, { 'content-type': 'text/plain' }).end('metrics unavailable\n');
      },
    );
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) =>
      reject(
        err.code === 'EADDRINUSE' || err.code === 'EACCES'
          ? new PortInUseError(opts.port, opts.what ?? 'worker metrics (WORKER_METRICS_PORT)')
          : err,
      ),
    );
    server.listen({ port: opts.port, host, exclusive: true }, () => resolve());
  });
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : opts.port;
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}/metrics`,
    port,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        server.closeAllConnections();
      }),
  };
}
