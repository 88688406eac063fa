# One image for every onceflow process; docker-compose.yml picks the command.
FROM node:20-bookworm-slim
WORKDIR /app
ENV NODE_ENV=production
COPY package.json package-lock.json ./
# tsx runs the TypeScript sources directly; dev tools are not needed at run time.
RUN npm ci --omit=dev --no-audit --no-fund
COPY tsconfig.json ./
COPY src ./src
COPY workflows ./workflows
COPY activities ./activities
COPY migrations ./migrations
COPY scripts ./scripts
# The workflow bundle, built once here: workers find it by the hash of the
# workflow code and start polling in seconds instead of bundling (~12 s).
RUN node --import tsx scripts/build-workflow-bundle.ts
USER node
CMD ["node", "--import", "tsx", "src/worker/main.ts"]
