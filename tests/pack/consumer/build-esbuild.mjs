// esbuild build of the page, as the README tells esbuild users to do it (tensorlane/esbuild).
// argv: the esbuild package folder (the test's tools), the output folder.
import { pathToFileURL } from 'node:url';
import tensorlaneWasm from 'tensorlane/esbuild';

const { build } = await import(pathToFileURL(`${process.argv[2]}/lib/main.js`).href);
await build({ entryPoints: ['page.js'], bundle: true, format: 'esm', platform: 'browser', outdir: process.argv[3], logLevel: 'warning', plugins: [tensorlaneWasm()] });
