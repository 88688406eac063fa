/**
 * The metrics show every tenant's order and backlog figures, so they are
 * served on listeners of their own, bound to loopback unless
 * METRICS_BIND_HOST says otherwise, and never published: compose binds them
 * on its network for Prometheus, which scrapes the API's metrics port.
 */
import { describe, expect, it } from 'vitest';
import fs from 'node:fs';
import path from 'node:path';
import { parse as parseYaml } from 'yaml';
import { loadConfig } from '../../src/config.ts';

const root = path.resolve(import.meta.dirname, '../..');
const read = (rel: string) => fs.readFileSync(path.join(root, rel), 'utf8');

interface Service {
  environment?: Record<string, string>;
  ports?: (string | { target?: number; published?: string | number })[];
}

describe('metrics listeners', () => {
  it('bind to loopback by default, whatever BIND_HOST says', () => {
    expect(loadConfig({}).metricsBindHost).toBe('127.0.0.1');
    expect(loadConfig({ BIND_HOST: '0.0.0.0' }).metricsBindHost).toBe('127.0.0.1');
    expect(loadConfig({ METRICS_BIND_HOST: '0.0.0.0' }).metricsBindHost).toBe('0.0.0.0');
    expect(loadConfig({}).ports.apiMetrics).toBe(9462);
    expect(loadConfig({ API_METRICS_PORT: '19462' }).ports.apiMetrics).toBe(19462);
    expect(() => loadConfig({ API_METRICS_PORT: 'x' })).toThrow(/API_METRICS_PORT/);
  });

  it('compose: reachable by Prometheus on the compose network, never published', () => {
    const compose = parseYaml(read('docker-compose.yml'), { merge: true }) as {
      services: Record<string, Service>;
    };
    const config = loadConfig({});
    for (const name of ['api', 'worker']) {
      const service = compose.services[name]!;
      expect(service.environment?.METRICS_BIND_HOST, name).toBe('0.0.0.0');
      const published = (service.ports ?? []).map((p) =>
        typeof p === 'string' ? p.split(':').at(-1)!.split('/')[0] : String(p.target),
      );
      for (const port of [config.ports.apiMetrics, config.ports.workerMetrics]) {
        expect(published, `${name} publishes metrics port ${port}`).not.toContain(String(port));
      }
    }
  });

  it('Prometheus scrapes the API on its metrics port, not its public port', () => {
    const prom = parseYaml(read('deploy/prometheus/prometheus.yml')) as {
      scrape_configs: { job_name: string; static_configs?: { targets: string[] }[] }[];
    };
    const job = prom.scrape_configs.find((j) => j.job_name === 'onceflow-api');
    const config = loadConfig({});
    expect(job?.static_configs?.flatMap((s) => s.targets)).toEqual([`api:${config.ports.apiMetrics}`]);
  });
});
