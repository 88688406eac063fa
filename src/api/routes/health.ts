/** Liveness and readiness. Neither needs auth nor counts against a rate limit. */
import type { FastifyPluginAsync } from 'fastify';
import { ping, withClient } from '../../db/index.ts';
import { errorFields, log } from '../../log.ts';
import type { ApiContext } from '../context.ts';
import { ProblemError } from '../problems.ts';
import { Health, jsonResponse, problemResponse } from '../schemas.ts';

const CHECK_TIMEOUT_MS = 2000;

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

export const healthRoutes: FastifyPluginAsync<{ ctx: ApiContext }> = async (app, { ctx }) => {
  app.get(
    '/healthz',
    {
      config: { rateLimit: false },
      schema: {
        operationId: 'getLiveness',
        summary: 'Liveness: the process serves HTTP',
        tags: ['health'],
        response: { 200: jsonResponse('The process is up', Health) },
      },
    },
    async () => ({ status: 'ok' }),
  );

  app.get(
    '/readyz',
    {
      config: { rateLimit: false },
      schema: {
        operationId: 'getReadiness',
        summary: 'Readiness: Postgres and Temporal answer',
        tags: ['health'],
        response: {
          200: jsonResponse('Postgres and Temporal answer', Health),
          503: problemResponse('A dependency is down (`checks` says which)'),
        },
      },
    },
    async () => {
      const checks: Record<string, string> = {};
      const run = async (name: string, fn: () => Promise<unknown>) => {
        try {
          await withTimeout(fn(), CHECK_TIMEOUT_MS);
          checks[name] = 'ok';
        } catch (err) {
          log.warn('readiness check failed', { check: name, ...errorFields(err) });
          checks[name] = 'unavailable';
        }
      };
      await Promise.all([
        run('postgres', () => withClient(ctx.pool, (c) => ping(c))),
        run('temporal', () => ctx.temporal.workflowService.getSystemInfo({})),
      ]);
      if (Object.values(checks).some((v) => v !== 'ok')) {
        throw new ProblemError('unavailable', 'Not ready.', { checks });
      }
      return { status: 'ok', checks };
    },
  );
};
