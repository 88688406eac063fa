// @ts-check
/**
 * The import rules of the codebase, checked by `npm run lint` (docs/ARCHITECTURE.md).
 *
 * Arrows point down: dev/, test/, bench/ and scripts/ may import the product;
 * the product (src/, workflows/, activities/) never imports them. workflows/
 * runs in Temporal's deterministic sandbox, so it sees only what src/ publishes
 * for it: src/<concept>/contract.ts and src/orders/model.ts. Only the worker's
 * composition root (src/worker/) registers workflows and activities.
 * ESLint (eslint.config.js) checks the same direction per file, with Node
 * built-ins; this checks it on the resolved graph, and cycles, which a
 * per-file linter cannot see.
 */
const HARNESS = '^(dev|test|bench|scripts)/';
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
      from: { path: '^(src|workflows|activities)/' },
      to: { path: HARNESS },
    },
    {
      name: 'src-not-to-workflows-or-activities',
      severity: 'error',
      comment:
        'src/ must not import workflows/ or activities/ (only the worker composition root, src/worker/, ' +
        'wires them). Move shared definitions to a src/<concept>/contract.ts module.',
      from: { path: '^src/', pathNot: '^src/worker/' },
      to: { path: '^(workflows|activities)/' },
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
      name: 'no-upward-arrows-in-src',
      severity: 'error',
      comment:
        'src/api/ and src/worker/ are composition roots and src/ops/ is mounted by the API: nothing below them ' +
        'imports them. Shared HTTP helpers live in src/http/, port checks in src/process/.',
      from: { path: '^src/', pathNot: '^src/(api|worker|ops)/' },
      to: { path: '^src/(api|worker|ops)/' },
    },
    {
      name: 'ops-not-to-api',
      severity: 'error',
      comment:
        'The API mounts the admin routes (src/ops/); the admin routes must not reach back into src/api/.',
      from: { path: '^src/ops/' },
      to: { path: '^src/api/' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: ['^(dist|\\.tools|\\.data)/', '^packages/onceflow/dist/'] },
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
