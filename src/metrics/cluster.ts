/**
 * Metrics under node:cluster: a scrape must see every process, not whichever took the connection,
 * so the primary asks each over IPC and merges. A process that does not answer in time is left out,
 * and `onceflow_metrics_source_up` says so.
 */
import type { Worker } from 'node:cluster';
import { AggregatorRegistry, Gauge, type Registry } from 'prom-client';
import { errorFields, log } from '../log.ts';

/** One registry's metrics as `getMetricsAsJSON` gives them: what crosses the IPC channel. */
type MetricJson = Awaited<ReturnType<Registry['getMetricsAsJSON']>>[number];

const REQUEST = 'onceflow:metrics-request';
const REPLY = 'onceflow:metrics-reply';

interface Request {
  type: typeof REQUEST;
  id: number;
}
interface Reply {
  type: typeof REPLY;
  id: number;
  metrics?: MetricJson[];
  error?: string;
}

const isRequest = (m: unknown): m is Request => (m as Request | null)?.type === REQUEST;
const isReply = (m: unknown): m is Reply => (m as Reply | null)?.type === REPLY;

/**
 * In a cluster worker: answer the primary's scrapes with `registry`.
 * Returns the function that stops answering.
 */
export function answerPrimaryScrapes(registry: Registry): () => void {
  const onMessage = (message: unknown) => {
    if (!isRequest(message)) return;
    const reply = (body: Omit<Reply, 'type' | 'id'>) =>
      process.send?.({ type: REPLY, id: message.id, ...body } satisfies Reply);
    registry.getMetricsAsJSON().then(
      (metrics) => reply({ metrics }),
      (err: unknown) => {
        log.error('metrics: render for the cluster primary failed', errorFields(err));
        reply({ error: err instanceof Error ? err.message : String(err) });
      },
    );
  };
  process.on('message', onMessage);
  return () => process.off('message', onMessage);
}

export interface ClusterScrapeOptions {
  /** The processes to ask, with the name their `process` label carries. */
  workers: () => { name: string; worker: Worker }[];
  /** The primary's own registry: `onceflow_metrics_source_up` lives here, and is merged in. */
  registry: Registry;
  /** Per process, per scrape. Default 2 000 ms. */
  timeoutMs?: number;
}

/** In the cluster primary: a `collect` for startMetricsServer that merges every process's registry. */
export function clusterCollector(opts: ClusterScrapeOptions): () => Promise<string> {
  const timeoutMs = opts.timeoutMs ?? 2_000;
  const existing = opts.registry.getSingleMetric('onceflow_metrics_source_up');
  const sourceUp =
    (existing as Gauge<'source'> | undefined) ??
    new Gauge({
      name: 'onceflow_metrics_source_up',
      help: '1 if a merged metrics source (e.g. the Temporal SDK exporter) answered on the last scrape.',
      labelNames: ['source'] as const,
      registers: [opts.registry],
    });
  let nextId = 0;

  const ask = (name: string, worker: Worker): Promise<MetricJson[] | undefined> => {
    const id = nextId++;
    return new Promise((resolve) => {
      const finish = (metrics: MetricJson[] | undefined, problem?: string) => {
        clearTimeout(timer);
        worker.off('message', onMessage);
        worker.off('exit', onExit);
        sourceUp.set({ source: name }, metrics ? 1 : 0);
        if (problem)
          log.warn('metrics: an api process did not answer the scrape', { process: name, problem });
        resolve(metrics);
      };
      const onMessage = (message: unknown) => {
        if (!isReply(message) || message.id !== id) return;
        finish(message.metrics, message.error);
      };
      const onExit = () => finish(undefined, 'exited');
      const timer = setTimeout(() => finish(undefined, `no answer within ${timeoutMs} ms`), timeoutMs);
      worker.on('message', onMessage);
      worker.once('exit', onExit);
      try {
        worker.send({ type: REQUEST, id } satisfies Request);
      } catch (err) {
        finish(undefined, err instanceof Error ? err.message : String(err));
      }
    });
  };

  return async () => {
    const live = opts.workers().filter(({ worker }) => worker.isConnected());
    const answers = await Promise.all(live.map(({ name, worker }) => ask(name, worker)));
    const own = await opts.registry.getMetricsAsJSON();
    // One exposition: a metric's HELP and TYPE appear once, its series from every process below them.
    return AggregatorRegistry.aggregate([...answers.filter((a) => a !== undefined), own]).metrics();
  };
}
