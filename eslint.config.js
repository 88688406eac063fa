// @ts-check
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import { builtinModules } from 'node:module';

const nodeBuiltins = [...builtinModules, ...builtinModules.map((m) => `node:${m}`)];
const workflowBuiltins = nodeBuiltins.map((name) => ({
  name,
  message:
    'Workflow code must be deterministic: Node built-ins are not allowed in workflows/ or what it imports.',
}));
const noDatabase = {
  group: ['pg', 'pg/*', '../src/db*', '../src/**/db*'],
  message: 'No database access from workflow code.',
};

export default tseslint.config(
  {
    ignores: [
      'node_modules/',
      '.tools/',
      '.data/',
      'dist/',
      'bench/results/',
      'test-results/',
      'coverage/',
      'packages/*/docs/api/',
      'packages/*/dist/',
      'examples/*/dist/',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    // CommonJS tool configs (.dependency-cruiser.cjs).
    files: ['**/*.cjs'],
    languageOptions: { sourceType: 'commonjs', globals: { module: 'writable', require: 'readonly' } },
  },
  {
    // The operator console runs in the browser (console/, served by src/console/routes.ts).
    files: ['console/**/*.js'],
    languageOptions: {
      sourceType: 'module',
      globals: {
        document: 'readonly',
        window: 'readonly',
        location: 'readonly',
        sessionStorage: 'readonly',
        fetch: 'readonly',
        URLSearchParams: 'readonly',
        Node: 'readonly',
        setInterval: 'readonly',
        clearInterval: 'readonly',
      },
    },
  },
  {
    files: ['**/*.ts'],
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  {
    // Workflow code runs in Temporal's deterministic sandbox: no I/O, no clocks, no Node built-ins.
    files: ['workflows/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: workflowBuiltins,
          patterns: [
            noDatabase,
            {
              // The arrows point one way: workflows/ sees only what src/ publishes for it.
              regex: '^\\.\\./src/(?!orders/model\\.ts$|[^/]+/contract\\.ts$)',
              message:
                'Workflow code may import from src/ only the deterministic, I/O-free shared modules: ' +
                'src/<concept>/contract.ts and src/orders/model.ts.',
            },
          ],
        },
      ],
    },
  },
  {
    // src/ never imports workflows/ or activities/: they depend on src/, not the other way round.
    // Definitions both sides need live in src/<concept>/contract.ts. Only the composition roots
    // (src/api/, src/worker/, src/cli/; .dependency-cruiser.cjs) may: the worker registers them.
    files: ['src/**/*.ts'],
    ignores: ['src/{api,worker,cli}/**'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '^(\\.\\./)+(workflows|activities)(/|$)',
              message:
                'src/ must not import workflows/ or activities/ (only a composition root wires them). ' +
                'Move shared definitions to a src/<concept>/contract.ts module.',
            },
          ],
        },
      ],
    },
  },
  {
    // The app uses the core package as any user does: by its name, never by a path into it.
    files: [
      'src/**/*.ts',
      'activities/**/*.ts',
      'workflows/**/*.ts',
      'dev/**/*.ts',
      'scripts/**/*.ts',
      'bench/**/*.ts',
      'test/**/*.ts',
    ],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '(^|/)packages/onceflow(/|$)',
              message:
                "Import the core by its name ('onceflow', 'onceflow/workflow'): its modules are internal.",
            },
          ],
        },
      ],
    },
  },
  {
    // An example is a user of the library: it imports onceflow's package exports, never its sources.
    files: ['examples/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '^(\\.\\./)+(src|workflows|activities|dev|test|bench|scripts)(/|$)',
              message:
                'Examples use the library only through its package exports (onceflow, onceflow/workflow).',
            },
          ],
        },
      ],
    },
  },
  {
    // The modules of src/ that workflow code imports are held to the workflow's rules, and may
    // import only each other: whatever the workflow imports stays deterministic and I/O-free.
    files: [
      'src/*/contract.ts',
      'src/orders/model.ts',
      'packages/onceflow/src/keys.ts',
      'packages/onceflow/src/failures.ts',
      'packages/onceflow/src/workflow.ts',
    ],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: workflowBuiltins,
          patterns: [
            { group: ['pg', 'pg/*'], message: noDatabase.message },
            {
              regex:
                '^\\.(?!/model\\.ts$|/contract\\.ts$|/keys\\.ts$|/failures\\.ts$|\\./[^/]+/contract\\.ts$|\\./orders/model\\.ts$)',
              message:
                'A module shared with workflow code may import only other shared modules ' +
                "(src/<concept>/contract.ts, src/orders/model.ts, the core's keys.ts and failures.ts, or 'onceflow/workflow').",
            },
          ],
        },
      ],
    },
  },
);
