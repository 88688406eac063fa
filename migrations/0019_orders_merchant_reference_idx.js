// Why: the natural key's guarantee (issue 27): at most one order per
// (tenant, merchant_reference). POST /v1/orders inserts with ON CONFLICT on
// this index, so a second order with the same reference is refused by the
// database inside the create transaction, even when two requests race.
// Partial (merchant_reference is optional): orders without one are not in it.
// Built CONCURRENTLY (writes to orders keep flowing), so outside a
// transaction: see migrations/README.md. JavaScript, not TypeScript: the
// production image runs the migrations with plain Node (Dockerfile), which
// loads a .js file as it is and would refuse a .ts one.

/** @param {import('node-pg-migrate').MigrationBuilder} pgm */
export function up(pgm) {
  pgm.noTransaction();
  pgm.sql(`SET lock_timeout = '5s'`);
  // A failed concurrent build leaves an INVALID index: drop it so a re-run can build it again.
  pgm.sql(`DROP INDEX CONCURRENTLY IF EXISTS orders_tenant_merchant_reference`);
  pgm.sql(
    `CREATE UNIQUE INDEX CONCURRENTLY orders_tenant_merchant_reference
       ON orders (tenant_id, merchant_reference) WHERE merchant_reference IS NOT NULL`,
  );
  pgm.sql(`RESET lock_timeout`);
}
