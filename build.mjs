// Bundles src/ into dist/server.js: one CommonJS file that runs with `node dist/server.js`
// on Node.js 20+, alone in an empty folder (no package.json beside it, hence CommonJS).
import { build } from 'esbuild';
import { readFileSync } from 'node:fs';

const pkg = JSON.parse(readFileSync(new URL('./package.json', import.meta.url), 'utf8'));

await build({
  entryPoints: ['src/main.ts'],
  outfile: 'dist/server.js',
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node20',
  banner: { js: '#!/usr/bin/env node' },
  define: { __VERSION__: JSON.stringify(pkg.version) },
  legalComments: 'none',
  sourcemap: false,
  logLevel: 'warning',
});
