// ESLint for the TypeScript backend and tests (and the few .mjs generators).
// Formatting is Prettier's job (.prettierrc.json): no stylistic rules here.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/', 'build/', 'addon/build/', 'node_modules/', '.carry/', 'backend/src/vhost-user/dist/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      globals: { console: 'readonly', process: 'readonly', Buffer: 'readonly', URL: 'readonly' },
    },
    rules: {
      // A leading underscore marks a parameter kept for its place in a
      // signature (stubs, callbacks), as tsconfig's noUnusedParameters allows.
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrorsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_' },
      ],
      // The native addons (.node, found by path at run time) and the CUDA
      // provider (loaded only where CUDA is) come in by require() on purpose.
      '@typescript-eslint/no-require-imports': 'off',
      // Contexts declare their one-to-one calls as an interface merged with the
      // class whose prototype gets those methods after the class (providers/).
      '@typescript-eslint/no-unsafe-declaration-merging': 'off',
      '@typescript-eslint/no-empty-object-type': ['error', { allowInterfaces: 'with-single-extends' }],
      // `cond ? a() : b()` as a statement is the tree's short form of if/else.
      '@typescript-eslint/no-unused-expressions': ['error', { allowTernary: true, allowShortCircuit: true }],
      // A `let` declared before the closures that read it and assigned once after them cannot be const.
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
    },
  },
  // Type-aware rules, a short named list (review 3 §4.6) rather than all of
  // recommendedTypeChecked: in an event-loop backend a promise nobody awaits
  // is an unhandled rejection that kills the process, or an error lost.
  {
    files: ['**/*.ts'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      // Await it, or `void` it with a comment that says why nothing waits.
      '@typescript-eslint/no-floating-promises': 'error',
      // An async function where a callback's result is ignored (an event
      // handler, forEach) drops its rejection the same way.
      '@typescript-eslint/no-misused-promises': 'error',
      // Not await-thenable: a Now<T> (sys/now.ts: a value, or a promise of
      // it) is awaited or passed to Promise.all on purpose, which it flags.
    },
  },
);
