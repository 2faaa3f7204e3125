// `tensorlane/esbuild`: an esbuild plugin that bundles tensorlane's wasm for the browser.
// Vite, Rollup, webpack and Parcel find the wasm by themselves (js/browser.js loads it as
// `new URL('../wasm/pkg/tensorlane_wasm_bg.wasm', import.meta.url)`); esbuild does not rewrite that
// pattern (evanw/esbuild#795), so without this plugin the bundle asks for a file that is not in
// the output. With it, the .wasm is emitted into the output folder through esbuild's `file`
// loader and js/browser.js loads it from there:
//
//   import { build } from 'esbuild';
//   import tensorlaneWasm from 'tensorlane/esbuild';
//   await build({ entryPoints: ['app.js'], bundle: true, format: 'esm', outdir: 'dist', plugins: [tensorlaneWasm()] });
import { readFile, realpath } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';

const BROWSER = fileURLToPath(new URL('./browser.js', import.meta.url));
const WASM_URL = /new URL\((['"])\.\.\/wasm\/pkg\/tensorlane_wasm_bg\.wasm\1, import\.meta\.url\)/;

/** The plugin: give it to esbuild's `plugins` (bundle: true, format: 'esm'). */
export default function tensorlaneWasm() {
  return {
    name: 'tensorlane-wasm',
    setup(build) {
      const browser = realpath(BROWSER).catch(() => BROWSER);
      build.onLoad({ filter: /[\\/]browser\.js$/ }, async (args) => {
        if ((await realpath(args.path).catch(() => args.path)) !== (await browser)) return undefined;
        const src = await readFile(args.path, 'utf8');
        if (!WASM_URL.test(src)) throw new Error(`tensorlane/esbuild: ${args.path} no longer loads the wasm as new URL('../wasm/pkg/tensorlane_wasm_bg.wasm', import.meta.url); this plugin and the package disagree (reinstall tensorlane)`);
        const contents = `import __tensorlaneWasmFile from '../wasm/pkg/tensorlane_wasm_bg.wasm';\n${src.replace(WASM_URL, 'new URL(__tensorlaneWasmFile, import.meta.url)')}`;
        return { contents, loader: 'js' };
      });
      build.onLoad({ filter: /tensorlane_wasm_bg\.wasm$/ }, async (args) => ({ contents: await readFile(args.path), loader: 'file' }));
    },
  };
}
