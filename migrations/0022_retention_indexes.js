// Why: retention for webhook_events and workflow_outbox (issue 29, item 3:
// every table gets a retention rule). The retention run deletes old rows in
// bounded batches, oldest first; without an index on the age column each
// batch would scan the whole table, which grows by millions of rows a day at
// the benchmark's rate. webhook_events had only its primary key; the outbox's
// indexes are partial over unstarted rows, while retention deletes started
// ones, so its index is partial over those (the relay's indexes stay small).
// Built CONCURRENTLY (the webhook route and the API keep writing), so outside
// a transaction: see migrations/README.md. JavaScript, not TypeScript: the
// production image runs the migrations with plain Node (Dockerfile).

/** @param {import('node-pg-migrate').MigrationBuilder} pgm */
export function up(pgm) {
  pgm.noTransaction();
  pgm.sql(`SET lock_timeout = '5s'`);
  // A failed concurrent build leaves an INVALID index: drop it so a re-run can build it again.
  pgm.sql(`DROP INDEX CONCURRENTLY IF EXISTS webhook_events_received_idx`);
  pgm.sql(`CREATE INDEX CONCURRENTLY webhook_events_received_idx ON webhook_events (received_at)`);
  pgm.sql(`DROP INDEX CONCURRENTLY IF EXISTS workflow_outbox_started_idx`);
  pgm.sql(
    `CREATE INDEX CONCURRENTLY workflow_outbox_started_idx
       ON workflow_outbox (started_at) WHERE started_at IS NOT NULL`,
  );
  pgm.sql(`RESET lock_timeout`);
}
