// Opens a view's source ({name, file?: File|Blob, url?: string}) with the package's open() inside
// a Worker (compare-worker.js, graph-worker.js). A URL source goes to open(url) where the build
// has it (HTTP Range reads); until then it is refused with a message saying so.
import * as tensorlane from '../js/browser.js';

/** A reader of `src` (`companions`: {name: Blob} for ONNX external data and shards). */
export async function openSource(src, companions) {
  const options = companions && Object.keys(companions).length ? { companions } : {};
  if (src.file) return tensorlane.open(src.file, options);
  if (src.url) {
    try {
      return await tensorlane.open(src.url, options);
    } catch (e) {
      if (e instanceof TypeError && /needs Node/.test(e.message)) {
        throw new Error(`${src.name ?? src.url}: opening by URL is not available in this build yet; pick the file instead`);
      }
      throw e;
    }
  }
  throw new Error(`${src.name ?? 'source'}: neither a file nor a URL was given`);
}

/** A plain, cloneable message for an error (name, message, format fields). */
export function errorMessage(e) {
  return { name: e?.name ?? 'Error', message: String(e?.message ?? e), kind: e?.kind, offset: e?.offset, tensor: e?.tensor };
}
