// Types of `tensorlane/esbuild` (js/esbuild.js): an esbuild plugin, typed structurally so that
// this package does not depend on esbuild's types.

/** esbuild plugin that emits tensorlane's .wasm and run()'s Worker (bundled) into the output folder (pass to `plugins`). */
export default function tensorlaneWasm(): { name: string; setup(build: any): void };
