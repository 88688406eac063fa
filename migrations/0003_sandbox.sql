-- Why: this file used to create the sandbox provider's schema (`sandbox`). The
-- sandbox is a dev tool, not the product, so its schema moved to a migration
-- chain of its own (dev/sandbox/migrations/, applied by the sandbox at start).
--
-- The file stays, empty of DDL, because migration numbers are history:
-- databases that applied 0003 have it recorded in pgmigrations, and the
-- runner's order check needs the name to still be here. On such databases the
-- sandbox's chain adopts the tables this file created (it is IF NOT EXISTS
-- throughout); on new ones, nothing of the sandbox's is created here.
SELECT 1;
