/**
 * Benchmark (not a test) of the HTTP client a provider call goes through:
 * global `fetch`, `node:http` with a keep-alive agent, and undici's `request`
 * on a keep-alive Agent (what src/providers/sandbox.ts and the sandbox's
 * webhook dispatcher use).
 *
 *   npm run bench:http [-- --calls=3000] [--rounds=3] [--concurrency=8]
 *
 * A server in a child process (loopback, a free port) answers each POST with a
 * charge-sized JSON body, as the sandbox does. In each round every client
 * sends `calls` requests (a warm-up first) at `concurrency` in flight, and
 * reports this process's CPU per call (user + system, `process.cpuUsage`):
 * the client's cost, which is what a worker pays per provider call. Rounds
 * alternate the clients, so a drift of the machine's speed hits each alike.
 * Writes bench/results/http-client.json with each client's CPU per call and
 * its ratio to fetch's (median over rounds). Stops by itself; the server is
 * killed by PID.
 */
import { fork } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { InvalidArgumentError } from 'commander';
import { Agent, request } from 'undici';
import { createCommand, parseCli, positiveInt } from '../src/cli/command.ts';

const CHARGE = JSON.stringify({
  id: 'ch_0123456789abcdefghijklmn',
  object: 'charge',
  amount: 1250,
  currency: 'eur',
  status: 'succeeded',
  failure_code: null,
  payment_method: 'pm_card_visa',
  description: null,
  receipt_email: 'customer@example.com',
  metadata: { order_id: 'ord_0123456789abcdef01234567', tenant_id: 'acme' },
  idempotency_key: 'order/acme/ord_0123456789abcdef01234567/charge',
  created: 1764590000,
});

if (process.argv[2] === '--serve') {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' }).end(CHARGE);
    });
  });
  server.keepAliveTimeout = 60_000;
  server.listen(0, '127.0.0.1', () => {
    process.send!((server.address() as { port: number }).port);
  });
} else {
  await main();
}

/** A positive integer no larger than `max` (the run stays bounded), as a commander option parser. */
function upTo(max: number): (raw: string) => number {
  return (raw) => {
    const n = positiveInt(raw);
    if (n > max) throw new InvalidArgumentError(`must be at most ${max}`);
    return n;
  };
}

async function main(): Promise<void> {
  const program = createCommand('bench:http', 'CPU per provider call: fetch vs node:http vs undici request.')
    .option('--calls <n>', 'requests per client per round, at most 100000', upTo(100_000), 3000)
    .option('--rounds <n>', 'rounds (each runs every client once), at most 20', upTo(20), 3)
    .option('--concurrency <n>', 'requests in flight, at most 64', upTo(64), 8)
    .addHelpText('after', '\nRun as: npm run bench:http [-- options], e.g. npm run bench:http -- --rounds=5');
  parseCli(program);
  const opts = program.opts<{ calls: number; rounds: number; concurrency: number }>();

  const server = fork(import.meta.filename, ['--serve'], {
    execArgv: ['--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the server did not start within 30 s')), 30_000);
    server.once('message', (m) => {
      clearTimeout(timer);
      resolve(Number(m));
    });
    server.once('exit', (code) => reject(new Error(`the server exited (${code})`)));
  });
  try {
    const url = `http://127.0.0.1:${port}/v1/charges`;
    const body = JSON.stringify({
      amount: 1250,
      currency: 'eur',
      payment_method: 'pm_card_visa',
      metadata: { order_id: 'ord_0123456789abcdef01234567', tenant_id: 'acme' },
    });
    const headers = {
      accept: 'application/json',
      'content-type': 'application/json',
      'idempotency-key': 'order/acme/ord_0123456789abcdef01234567/charge',
    };
    const httpAgent = new http.Agent({ keepAlive: true });
    const undiciAgent = new Agent();
    const clients: Record<string, () => Promise<unknown>> = {
      fetch: async () => {
        const res = await fetch(url, { method: 'POST', headers, body, signal: AbortSignal.timeout(5_000) });
        return JSON.parse(await res.text());
      },
      'node:http': () =>
        new Promise((resolve, reject) => {
          const req = http.request(
            url,
            {
              method: 'POST',
              agent: httpAgent,
              headers: { ...headers, 'content-length': Buffer.byteLength(body) },
              signal: AbortSignal.timeout(5_000),
            },
            (res) => {
              let text = '';
              res.setEncoding('utf8');
              res.on('data', (chunk: string) => (text += chunk));
              res.on('end', () => resolve(JSON.parse(text)));
              res.on('error', reject);
            },
          );
          req.on('error', reject);
          req.end(body);
        }),
      'undici request': async () => {
        const res = await request(url, {
          method: 'POST',
          headers,
          body,
          signal: AbortSignal.timeout(5_000),
          dispatcher: undiciAgent,
        });
        return JSON.parse(await res.body.text());
      },
    };

    const perCall: Record<string, number[]> = Object.fromEntries(Object.keys(clients).map((k) => [k, []]));
    for (let round = 1; round <= opts.rounds; round++) {
      const names = Object.keys(clients);
      if (round % 2 === 0) names.reverse();
      for (const name of names) {
        const call = clients[name]!;
        for (let i = 0; i < 200; i++) await call();
        let sent = 0;
        const before = process.cpuUsage();
        const t0 = performance.now();
        await Promise.all(
          Array.from({ length: opts.concurrency }, async () => {
            while (sent < opts.calls) {
              sent++;
              await call();
            }
          }),
        );
        const used = process.cpuUsage(before);
        const micros = (used.user + used.system) / opts.calls;
        perCall[name]!.push(micros);
        console.log(
          `[http] round ${round}/${opts.rounds} ${name.padEnd(15)} ${micros.toFixed(0).padStart(5)} µs CPU per call ` +
            `(${((opts.calls / (performance.now() - t0)) * 1000).toFixed(0)} calls/s)`,
        );
      }
    }
    await undiciAgent.close();
    httpAgent.destroy();

    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    const fetchMedian = median(perCall.fetch!);
    const summary = Object.fromEntries(
      Object.entries(perCall).map(([name, xs]) => [
        name,
        {
          cpuMicrosPerCall: xs.map((x) => Math.round(x)),
          medianCpuMicrosPerCall: Math.round(median(xs)),
          ratioToFetch: Math.round((median(xs) / fetchMedian) * 100) / 100,
        },
      ]),
    );
    console.log('\n client          median µs CPU/call  ratio to fetch');
    for (const [name, s] of Object.entries(summary)) {
      console.log(
        ` ${name.padEnd(15)} ${String(s.medianCpuMicrosPerCall).padStart(18)}  ${s.ratioToFetch.toFixed(2).padStart(14)}`,
      );
    }
    const out = path.resolve(import.meta.dirname, 'results/http-client.json');
    const report = {
      generatedAt: new Date().toISOString(),
      machine: { cpus: os.cpus().length, cpuModel: os.cpus()[0]?.model ?? 'unknown', node: process.version },
      options: opts,
      clients: summary,
    };
    fs.writeFileSync(out, `${JSON.stringify(report, null, 2)}\n`);
    console.log(`\n[http] wrote ${path.relative(process.cwd(), out)}`);
  } finally {
    server.kill();
  }
}
