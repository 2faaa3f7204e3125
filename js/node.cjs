// CommonJS entry of the npm package `tensorlane` under Node (`require('tensorlane')`): the same
// module as `import` gives (js/node.js, one instance for both), loaded through Node's require() of
// ES modules, which Node 20.19+ and 22.12+ do without a flag. js/node.js and js/wasm-node.js have
// no top-level await for that reason: both backends initialise synchronously.
'use strict';

try {
  module.exports = require('./node.js');
} catch (e) {
  if (e && (e.code === 'ERR_REQUIRE_ESM' || e.code === 'ERR_REQUIRE_ASYNC_MODULE')) {
    throw new Error(`require('tensorlane') needs Node.js 20.19+ or 22.12+ (require() of ES modules); this is ${process.version}. Upgrade Node, or use \`import\` / \`await import('tensorlane')\`.`, { cause: e });
  }
  throw e;
}
