# One image for every onceflow process; docker-compose.yml picks the command.
# The `product` stage (the default) holds only what ships: the production
# dependencies, the compiled JavaScript (npm run build:app -> dist/app), the
# prebuilt workflow bundle and the SQL migrations. No TypeScript runs in it and
# no harness (dev/), tests or benchmarks are in it. Its entry points are the
# files test/deploy/compiled-entrypoints.test.ts builds and starts (and
# test/deploy/production-install.test.ts starts from a folder holding what the
# `product` stage holds, read from its COPY lines, after `npm ci --omit=dev`):
#   node dist/app/src/worker/main.js     the worker (default command)
#   node dist/app/src/api/main.js        the API (dist/app/src/api/cluster.js: several on one port)
#   node dist/app/src/cli/migrate.js     the migrations
#   node bin/onceflow.js ops|api-key …   the operator's commands (dist/app/src/cli/ops.js, api-key.js)
# The `sandbox` stage is the sandbox provider, a dev tool compose runs as a
# stand-in for real providers. Never deploy it.
#
# The image uses the current Node LTS; the repo's own floor is package.json's engines.

# --- build: compile with the dev dependencies (TypeScript), then bundle the workflows.
FROM node:22-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
COPY packages/onceflow/package.json ./packages/onceflow/package.json
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.app.json ./
# The core package (packages/onceflow), which the app imports by name: built first, as an install has it.
COPY packages/onceflow ./packages/onceflow
COPY src ./src
COPY workflows ./workflows
COPY activities ./activities
RUN npm run build -w onceflow
RUN npm run build:app
# The workflow bundle, built once here from the compiled workflows (the files a worker in
# this image hashes at start): workers find it by that hash and poll in seconds instead of
# bundling (~12 s).
RUN node dist/app/src/cli/build-workflow-bundle.js

# --- deps: the production dependencies alone.
FROM node:22-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
COPY packages/onceflow/package.json ./packages/onceflow/package.json
RUN npm ci --omit=dev --no-audit --no-fund

# --- product: what ships, run as the unprivileged `node` user (files owned by root: read-only to it).
FROM node:22-bookworm-slim AS product
WORKDIR /app
ENV NODE_ENV=production
COPY --from=deps /app/node_modules ./node_modules
# package.json: "type": "module" for dist/app, and the version the API reports.
COPY package.json ./
# The core package as an install of it holds it: its manifest, its build and the ledger's SQL.
COPY packages/onceflow/package.json ./packages/onceflow/package.json
COPY packages/onceflow/migrations ./packages/onceflow/migrations
COPY --from=build /app/packages/onceflow/dist ./packages/onceflow/dist
COPY migrations ./migrations
# The operator console's static files, served by the API under /console.
COPY console ./console
COPY --from=build /app/dist/app ./dist/app
COPY --from=build /app/dist/workflow-bundle ./dist/workflow-bundle
# `onceflow ops|api-key …`: the command-line entry, which runs the compiled CLI in dist/app/src/cli/.
COPY bin ./bin
USER node
CMD ["node", "dist/app/src/worker/main.js"]

# --- sandbox: the build stage (sources, tsx) plus the sandbox provider, run from TypeScript.
# A dev tool (`build: { target: sandbox }` in compose), never the product.
FROM build AS sandbox
COPY dev/sandbox ./dev/sandbox
USER node
CMD ["node", "--import", "tsx", "dev/sandbox/main.ts"]

# The default target (a plain `docker build .`) is the product image.
FROM product
