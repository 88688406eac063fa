// @ts-check
/**
 * The import rules of the codebase, checked by `npm run lint` (docs/ARCHITECTURE.md).
 *
 * The layout in layers, arrows pointing down: the harness may import the
 * product; the product never imports the harness. In the product, the
 * composition roots (each process's entry) wire everything below them, and
 * nothing below imports them; only they reach workflows/ and activities/.
 * workflows/ runs in Temporal's deterministic sandbox, so it sees only what
 * src/ publishes for it: src/<concept>/contract.ts and src/orders/model.ts.
 * ESLint (eslint.config.js) checks the same direction per file, with Node
 * built-ins; this checks it on the resolved graph, and cycles, which a
 * per-file linter cannot see.
 */
/** What ships: the image and the app are built from these (with migrations/ and console/). */
const PRODUCT = '^(src|workflows|activities)/';
/** What never ships: the dev stack, tests, benchmarks and dev-time scripts. */
const HARNESS = '^(dev|test|bench|scripts)/';
/** The composition roots: the API, the worker and the command lines, each wiring a process. */
const COMPOSITION_ROOTS = '^src/(api|worker|cli)/';
/** The code Temporal runs: workflows and activities, which a composition root registers. */
const TEMPORAL_CODE = '^(workflows|activities)/';
/** The operator's service and admin routes: mounted by the API and run by the ops CLI. */
const OPERATOR = '^src/operator/';
/** The modules of src/ that workflow code may import (and that may import only each other). */
const WORKFLOW_SAFE = [
  '^src/[^/]+/contract\\.ts$',
  '^src/orders/model\\.ts$',
  // The core's workflow-safe entry (`onceflow/workflow`) and what it is made of.
  '^packages/onceflow/src/(keys|failures|workflow)\\.ts$',
];
/** The core package's public entries: everything else in it is internal to it. */
const CORE_ENTRIES = '^packages/onceflow/src/(index|workflow|postgres)\\.ts$';

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'A cycle means two modules are one: split out what both need, below both.',
      from: {},
      to: { circular: true },
    },
    {
      name: 'product-not-to-harness',
      severity: 'error',
      comment:
        'src/, workflows/ and activities/ ship; dev/, test/, bench/ and scripts/ do not. ' +
        'Move what the product needs into src/.',
      from: { path: PRODUCT },
      to: { path: HARNESS },
    },
    {
      name: 'only-roots-import-temporal-code',
      severity: 'error',
      comment:
        'Only a composition root (src/api/, src/worker/, src/cli/) imports workflows/ or activities/: the ' +
        'worker registers them. Move shared definitions to a src/<concept>/contract.ts module.',
      from: { path: '^src/', pathNot: COMPOSITION_ROOTS },
      to: { path: TEMPORAL_CODE },
    },
    {
      name: 'workflows-only-contracts',
      severity: 'error',
      comment:
        "Workflow code is deterministic: it imports @temporalio/workflow (and the OpenTelemetry interceptors' " +
        'workflow side), other workflow files, the shared contract modules, and types. No I/O, no Node built-ins.',
      from: { path: '^workflows/' },
      to: {
        dependencyTypesNot: ['type-only'],
        pathNot: [
          '^workflows/',
          ...WORKFLOW_SAFE,
          '^node_modules/@temporalio/workflow/',
          '^node_modules/@temporalio/interceptors-opentelemetry/lib/workflow/',
        ],
      },
    },
    {
      name: 'contracts-stay-workflow-safe',
      severity: 'error',
      comment:
        'A module shared with workflow code is held to its rules: it imports only other shared modules, ' +
        '@temporalio/common or @temporalio/workflow, and types.',
      from: { path: WORKFLOW_SAFE },
      to: {
        dependencyTypesNot: ['type-only'],
        pathNot: [...WORKFLOW_SAFE, '^node_modules/@temporalio/(common|workflow)/'],
      },
    },
    {
      name: 'core-only-by-its-entries',
      severity: 'error',
      comment:
        "Outside the core package, import it by name ('onceflow', 'onceflow/workflow') as any user does: " +
        'its other modules are internal. If the public API cannot express what you need, change the API.',
      from: { path: '^(?!packages/onceflow/)' },
      to: { path: '^packages/onceflow/src/', pathNot: CORE_ENTRIES },
    },
    {
      name: 'core-stands-alone',
      severity: 'error',
      comment:
        'The core package is installed without the app: it imports only its own modules, Node built-ins, ' +
        'pg and @temporalio/activity (its peers).',
      from: { path: '^packages/onceflow/src/' },
      to: {
        dependencyTypesNot: ['core', 'type-only'],
        pathNot: ['^packages/onceflow/src/', '^node_modules/(pg|@temporalio/activity)/'],
      },
    },
    {
      name: 'client-stands-alone',
      severity: 'error',
      comment:
        'The client package (@onceflow/client) is installed without the app or the core: it imports only ' +
        'its own modules, openapi-fetch and standardwebhooks (its dependencies: the HTTP client and the webhook ' +
        'verifier), type imports included; no Node built-ins either.',
      from: { path: '^packages/client/src/' },
      to: {
        pathNot: ['^packages/client/src/', '^node_modules/openapi-fetch/', '^node_modules/standardwebhooks/'],
      },
    },
    {
      name: 'client-only-by-its-entry',
      severity: 'error',
      comment:
        "Outside the client package, import it by name ('@onceflow/client'): its other modules are internal.",
      from: { path: '^(?!packages/client/)' },
      to: { path: '^packages/client/src/', pathNot: '^packages/client/src/index\\.ts$' },
    },
    {
      name: 'nothing-imports-a-root',
      severity: 'error',
      comment:
        'The composition roots (src/api/, src/worker/, src/cli/) are the top: nothing else in the product ' +
        'imports them. Shared HTTP helpers live in src/http/, port checks in src/process/.',
      from: { path: PRODUCT, pathNot: COMPOSITION_ROOTS },
      to: { path: COMPOSITION_ROOTS },
    },
    {
      name: 'operator-only-from-roots',
      severity: 'error',
      comment:
        'The operator (src/operator/) is used by the composition roots that serve it (the API mounts its ' +
        'routes, the ops CLI runs its commands), not by the modules below them.',
      from: { path: PRODUCT, pathNot: [COMPOSITION_ROOTS, OPERATOR] },
      to: { path: OPERATOR },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: ['^(dist|\\.tools|\\.data)/', '^packages/onceflow/dist/', '^packages/client/dist/'] },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['import', 'require', 'node', 'default', 'types'],
      mainFields: ['module', 'main', 'types', 'typings'],
    },
    reporterOptions: {
      text: { highlightFocused: true },
    },
  },
};
