// Builds the dashboard into dist/: one bundled script (with uPlot), one style
// sheet and the page. The runtime serves dist/ as it is; nothing loads from the network.
import { build } from 'esbuild';
import { mkdirSync, readFileSync, writeFileSync, copyFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, 'dist');
const require = createRequire(import.meta.url);
mkdirSync(out, { recursive: true });

await build({
  entryPoints: [join(here, 'src/app.js')],
  bundle: true,
  minify: true,
  sourcemap: true,
  format: 'iife',
  target: ['chrome100', 'firefox100', 'safari15'],
  outfile: join(out, 'app.js'),
  logLevel: 'warning',
});
const uplotCss = readFileSync(require.resolve('uplot/dist/uPlot.min.css'), 'utf8');
writeFileSync(join(out, 'app.css'), uplotCss + '\n' + readFileSync(join(here, 'src/style.css'), 'utf8'));
copyFileSync(join(here, 'src/index.html'), join(out, 'index.html'));
console.log(`dashboard: built ${out}`);
