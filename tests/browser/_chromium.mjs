// Shared by the Chromium suites (not a test file itself): whether Debian's Chromium, the wasm
// build and playwright-core are there (`missing` says what is not; with CI=true that is an error,
// not a skip), and how to launch it offline.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const CI = process.env.CI === 'true';
export const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
/** Headless, and no calls to Google services on a closed network. */
export const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'];

let why = null;
if (!existsSync(CHROMIUM)) why = `Chromium not found at ${CHROMIUM}`;
else if (!existsSync(fileURLToPath(new URL('../../wasm/pkg/tensorlane_wasm_bg.wasm', import.meta.url)))) why = 'wasm/pkg not built (scripts/build-js.sh)';
let pw = null;
try {
  ({ chromium: pw } = await import('playwright-core'));
} catch (e) {
  why ??= `playwright-core not installed (npm install): ${e.message}`;
}
if (why && CI) throw new Error(`${why} (CI=true: failing, not skipping)`);

/** Why the browser suites cannot run here, or null. */
export const missing = why;
/** playwright-core's chromium (null when missing). */
export const chromium = pw;
/** Launches the Chromium at CHROMIUM with ARGS. */
export const launch = () => chromium.launch({ executablePath: CHROMIUM, args: ARGS });
