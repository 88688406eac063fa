# One image for every onceflow process; docker-compose.yml picks the command.
# It holds only what ships: src/, workflows/, activities/, migrations/ and the
# operator scripts. The harness (dev/), tests and benchmarks stay out; the
# `sandbox` stage below adds the sandbox provider for compose's stand-in.
FROM node:20-bookworm-slim AS product
WORKDIR /app
ENV NODE_ENV=production
COPY package.json package-lock.json ./
# tsx runs the TypeScript sources directly (compiled JavaScript is a later
# step); dev tools are not needed at run time.
RUN npm ci --omit=dev --no-audit --no-fund
COPY tsconfig.json ./
COPY src ./src
COPY workflows ./workflows
COPY activities ./activities
COPY migrations ./migrations
# Operator tools run in the image (`docker compose run --rm api ...`); the dev scripts don't ship.
COPY scripts/migrate.ts scripts/build-workflow-bundle.ts scripts/ops.ts scripts/api-key.ts ./scripts/
COPY scripts/lib ./scripts/lib
# The workflow bundle, built once here: workers find it by the hash of the
# workflow code and start polling in seconds instead of bundling (~12 s).
RUN node --import tsx scripts/build-workflow-bundle.ts
USER node
CMD ["node", "--import", "tsx", "src/worker/main.ts"]

# The sandbox payment and email provider: a dev tool that compose runs as a
# stand-in for real providers (`build: { target: sandbox }`). Never deploy it.
FROM product AS sandbox
COPY dev/sandbox ./dev/sandbox
CMD ["node", "--import", "tsx", "dev/sandbox/main.ts"]

# The default target (a plain `docker build .`) is the product image.
FROM product
