/**
 * Liveness and readiness. Neither needs auth nor counts against a rate limit,
 * so readiness is cached and bounded (src/api/readiness.ts): a flood of probes
 * costs one check per second and never a connection of the pool.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { ApiContext } from '../context.ts';
import { ProblemError } from '../../http/problems.ts';
import { Readiness } from '../readiness.ts';
import { Health } from '../schemas.ts';
import { jsonResponse, problemResponse } from '../../http/openapi.ts';

export const healthRoutes: FastifyPluginAsync<{ ctx: ApiContext }> = async (app, { ctx }) => {
  const readiness = new Readiness({ pool: ctx.pool, temporal: ctx.temporal });
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
        summary: 'Readiness: Postgres answers (Temporal is reported, not required)',
        description:
          'Checked at most once a second; concurrent probes share the check. `checks.temporal` is ' +
          '`unavailable` while Temporal does not answer: orders are still accepted (their workflows ' +
          'start once it is back), so that alone does not make the API unready.',
        tags: ['health'],
        response: {
          200: jsonResponse('Postgres answers (`checks.temporal` says whether Temporal does)', Health),
          503: problemResponse('Postgres does not answer (`checks` says which dependency is down)'),
        },
      },
    },
    async () => {
      const { ready, checks } = await readiness.check();
      if (!ready) throw new ProblemError('unavailable', 'Not ready.', { checks });
      return { status: 'ok' as const, checks };
    },
  );
};
