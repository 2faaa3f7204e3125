// `tensorlane/esbuild`: an esbuild plugin that bundles tensorlane's wasm and run()'s Worker for
// the browser. Vite, Rollup, webpack and Parcel find both by themselves (js/browser.js and
// js/run-worker.js load the wasm as `new URL('../wasm/pkg/tensorlane_wasm_bg.wasm',
// import.meta.url)`, js/run.js starts `new Worker(new URL('./run-worker.js', import.meta.url))`);
// esbuild rewrites neither pattern (evanw/esbuild#795, #312), so without this plugin the bundle
// asks for files that are not in the output. With it:
//   - the .wasm is emitted into the output folder through esbuild's `file` loader and loaded
//     from there;
//   - js/run-worker.js is bundled by a nested esbuild build (this plugin included, so its wasm
//     is emitted the same way, with the same content-hashed name) and emitted as a file beside
//     it; js/run.js starts the Worker from that file. (With an `assetNames` that uses [dir], give
//     `outbase` too, so that both builds put the wasm in the same folder.)
//
//   import { build } from 'esbuild';
//   import tensorlaneWasm from 'tensorlane/esbuild';
//   await build({ entryPoints: ['app.js'], bundle: true, format: 'esm', outdir: 'dist', plugins: [tensorlaneWasm()] });
import { readFile, realpath } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';

const here = (f) => fileURLToPath(new URL(f, import.meta.url));
const WASM_URL = /new URL\((['"])\.\.\/wasm\/pkg\/tensorlane_wasm_bg\.wasm\1, import\.meta\.url\)/;
const WORKER_URL = /new URL\((['"])\.\/run-worker\.js\1, import\.meta\.url\)/;
const WORKER_NS = 'tensorlane-run-worker';

/** The plugin: give it to esbuild's `plugins` (bundle: true, format: 'esm'). */
export default function tensorlaneWasm() {
  return {
    name: 'tensorlane-wasm',
    setup(build) {
      const real = (p) => realpath(p).catch(() => p);
      const files = Promise.all(['./browser.js', './run-worker.js', './run.js'].map((f) => real(here(f))));
      const which = async (path) => {
        const [browser, worker, run] = await files;
        const p = await real(path);
        return p === browser || p === worker ? 'wasm' : p === run ? 'run' : null;
      };
      const stale = (path, what) => new Error(`tensorlane/esbuild: ${path} no longer ${what}; this plugin and the package disagree (reinstall tensorlane)`);

      build.onLoad({ filter: /[\\/](browser|run-worker|run)\.js$/, namespace: 'file' }, async (args) => {
        const kind = await which(args.path);
        if (!kind) return undefined;
        const src = await readFile(args.path, 'utf8');
        if (kind === 'wasm') {
          if (!WASM_URL.test(src)) throw stale(args.path, "loads the wasm as new URL('../wasm/pkg/tensorlane_wasm_bg.wasm', import.meta.url)");
          return { contents: `import __tensorlaneWasmFile from '../wasm/pkg/tensorlane_wasm_bg.wasm';\n${src.replace(WASM_URL, 'new URL(__tensorlaneWasmFile, import.meta.url)')}`, loader: 'js' };
        }
        if (!WORKER_URL.test(src)) throw stale(args.path, "starts its Worker as new URL('./run-worker.js', import.meta.url)");
        return { contents: `import __tensorlaneRunWorker from '${WORKER_NS}:run-worker.js';\n${src.replace(WORKER_URL, 'new URL(__tensorlaneRunWorker, import.meta.url)')}`, loader: 'js' };
      });
      build.onLoad({ filter: /tensorlane_wasm_bg\.wasm$/, namespace: 'file' }, async (args) => ({ contents: await readFile(args.path), loader: 'file' }));

      // The Worker: its own bundle (ES module), emitted as a file through the `file` loader.
      build.onResolve({ filter: new RegExp(`^${WORKER_NS}:`) }, async () => ({ path: (await files)[1], namespace: WORKER_NS }));
      build.onLoad({ filter: /.*/, namespace: WORKER_NS }, async (args) => {
        const o = build.initialOptions;
        const r = await build.esbuild.build({
          entryPoints: [args.path],
          bundle: true,
          format: 'esm',
          platform: 'browser',
          write: false,
          outdir: o.outdir ?? 'out',
          outbase: o.outbase,
          assetNames: o.assetNames,
          publicPath: o.publicPath,
          minify: o.minify,
          target: o.target,
          logLevel: 'silent',
          plugins: [tensorlaneWasm()],
        });
        const js = r.outputFiles.find((f) => f.path.endsWith('.js'));
        if (!js) throw new Error(`tensorlane/esbuild: bundling ${args.path} gave no JavaScript`);
        return { contents: js.contents, loader: 'file', watchFiles: Object.keys(r.metafile?.inputs ?? {}) };
      });
    },
  };
}
