// GUI benchmark in headless Chromium: node bench/gui/bench.mjs URL [REPEATS]
// (run from gui/ so playwright-core resolves; bench/gui/run.py does it). Measures, on the
// profile served at URL: navigation -> first view drawn (flame graph), and the response time of
// zoom (click a box), expand (open a collapsed table row), sort (click a column header), each
// from the input event to the next painted frame. Prints one JSON object.
import { launch } from "../../gui/e2e/browser.mjs";

const [url, repeatsArg] = process.argv.slice(2);
const repeats = parseInt(repeatsArg || "5", 10);
const browser = await launch();
const stats = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return { median: +s[Math.floor(s.length / 2)].toFixed(1), max: +s[s.length - 1].toFixed(1), n: s.length, all: s.map((x) => +x.toFixed(1)) };
};

// time from running `act` (in the page) to the next frame after it
const timed = (page, act, arg) =>
  page.evaluate(
    async ([src, a]) => {
      const fn = new Function("a", src);
      const t0 = performance.now();
      fn(a);
      await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
      return performance.now() - t0;
    },
    [act, arg],
  );

const result = { url: url.replace(/\/[^/]+\/$/, "/<token>/"), firstView: [], zoom: [], unzoom: [], expand: [], sort: [], viewSwitch: {} };
for (let r = 0; r < repeats; r++) {
  const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
  const t0 = Date.now();
  await page.goto(url);
  await page.waitForFunction(() => window.__dctx && window.__dctx.ready, null, { timeout: 60000, polling: 10 });
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0))));
  const wall = Date.now() - t0;
  const t = await page.evaluate(() => ({ readyAt: window.__dctx.readyAt, loadMs: window.__dctx.loadMs, nodes: window.__dctx.app.trees[0].n, boxes: window.__dctx.app.flame.boxes().length }));
  result.firstView.push({ wallMs: wall, readyAtMs: +t.readyAt.toFixed(1), fetchAndDecodeMs: +t.loadMs.toFixed(1), boxes: t.boxes });
  result.nodes = t.nodes;

  // zoom: click boxes at several depths, then back to the root
  for (const depth of [3, 8, 14, 20]) {
    const ms = await timed(
      page,
      `const app = window.__dctx.app; const bx = app.flame.boxes().filter(b => b.y === a * 18 && b.w > 4);
       if (!bx.length) return; const b = bx[Math.floor(bx.length / 2)]; const c = app.flame.canvas.getBoundingClientRect();
       app.flame.canvas.dispatchEvent(new MouseEvent('click', {clientX: c.left + b.x + b.w / 2, clientY: c.top + b.y + 5, bubbles: true}));`,
      depth,
    );
    result.zoom.push(ms);
  }
  result.unzoom.push(await timed(page, `window.__dctx.app.set({ focus: 0 });`));

  // tables: switching views computes them (bottom-up inverts the whole tree)
  for (const v of ["top", "bottom", "flat", "flame"]) {
    const ms = await timed(page, `document.querySelector('#tabs button[data-view="${v}"]').click();`);
    (result.viewSwitch[v] ||= []).push(ms);
  }
  await timed(page, `document.querySelector('#tabs button[data-view="top"]').click();`);
  // expand: open collapsed rows (the first few carets that are closed)
  for (let k = 0; k < 5; k++) {
    const ms = await timed(page, `const c = [...document.querySelectorAll('.ttable[data-name="top"] .trow .caret')].filter(e => e.textContent === '▸'); if (c.length) c[Math.min(c.length - 1, a)].click();`, k);
    result.expand.push(ms);
  }
  // sort: each header in turn
  for (const col of ["exc", "name", "incp", "inc"]) {
    result.sort.push(await timed(page, `document.querySelector('.ttable[data-name="top"] .th[data-col="${col}"]').click();`));
  }
  // sort of the flat view (one row per frame)
  await timed(page, `document.querySelector('#tabs button[data-view="flat"]').click();`);
  for (const col of ["exc", "inc"]) {
    result.sort.push(await timed(page, `document.querySelector('.ttable[data-name="flat"] .th[data-col="${col}"]').click();`));
  }
  await page.close();
}
await browser.close();
const out = {
  nodes: result.nodes,
  firstView: { readyAtMs: stats(result.firstView.map((x) => x.readyAtMs)), wallMs: stats(result.firstView.map((x) => x.wallMs)), fetchAndDecodeMs: stats(result.firstView.map((x) => x.fetchAndDecodeMs)), boxes: result.firstView[0].boxes },
  zoom: stats(result.zoom),
  unzoom: stats(result.unzoom),
  expand: stats(result.expand),
  sort: stats(result.sort),
  viewSwitch: Object.fromEntries(Object.entries(result.viewSwitch).map(([k, v]) => [k, stats(v)])),
};
console.log(JSON.stringify(out));
