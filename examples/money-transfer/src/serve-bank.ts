/**
 * Runs the example bank on BANK_PORT (default 4400) with three accounts:
 * alice (100.00), bob (0.00) and carol (closed: it refuses deposits).
 */
import { startBank } from './bank.js';
import { loadConfig } from './config.js';

const config = loadConfig(process.env);
const accounts = { alice: { balance: 10_000 }, bob: { balance: 0 }, carol: { balance: 0, closed: true } };
const bank = await startBank({ port: config.bankPort, accounts });
console.log(JSON.stringify({ msg: 'bank listening', url: bank.url }));
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    console.log(
      JSON.stringify({
        msg: 'bank closing',
        balances: Object.fromEntries(Object.keys(accounts).map((a) => [a, bank.balance(a)])),
        entries: bank.entries(),
      }),
    );
    void bank.close();
  });
}
