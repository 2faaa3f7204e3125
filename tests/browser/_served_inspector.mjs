// Shared by the suites that check an inspector some server serves (not a test file itself): the
// installed `tensorlane` binary (installed.test.mjs) and `npx tensorlane serve` of the packed npm
// package (tests/pack/). Opens `${base}/web-demo/?url=MODEL` in Chromium, waits for the tensor
// table, opens tensor `tensor` and waits for its statistics; returns what the page showed.

/**
 * `{ version, rows, state, stats, problems }`: the version line of the page, the tensor names of
 * the table, the statistics' state and `[data-stat]` values of `tensor`, and every page error,
 * console error and failed response. `shot`: a PNG path for a screenshot, or null.
 */
export async function inspectServed(browser, base, modelUrl, tensor, shot = null) {
  const page = await browser.newPage({ viewport: { width: 1200, height: 800 } });
  const problems = [];
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  page.on('console', (m) => m.type() === 'error' && problems.push(`console: ${m.text()}`));
  page.on('response', (r) => r.status() >= 400 && problems.push(`${r.status()} ${r.url()}`));
  try {
    await page.goto(`${base}/web-demo/?url=${encodeURIComponent(modelUrl)}&view=tensors`);
    await page.waitForSelector('body[data-state="ready"] [data-tensor]', { timeout: 60000 });
    const rows = await page.$$eval('[data-tensor]', (els) => [...new Set(els.map((e) => e.dataset.tensor))].sort());
    await page.evaluate((n) => {
      window.inspector.switchView('tensors');
      window.inspector.openTensor(n);
    }, tensor);
    await page.waitForFunction((n) => document.getElementById('tensor').dataset.tensor === n && ['done', 'error', 'cancelled'].includes(document.getElementById('tensor').dataset.statsState), tensor, { timeout: 60000 });
    await page.waitForFunction(() => document.getElementById('version').textContent !== '', null, { timeout: 10000 });
    const shown = await page.evaluate(() => ({
      version: document.getElementById('version').textContent,
      state: document.getElementById('tensor').dataset.statsState,
      stats: Object.fromEntries([...document.querySelectorAll('#tensor [data-stat]')].map((e) => [e.dataset.stat, Number(e.dataset.value)])),
    }));
    if (shot) await page.screenshot({ path: shot, fullPage: true });
    return { ...shown, rows, problems };
  } finally {
    await page.close();
  }
}
