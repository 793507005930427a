// How values combine, in a real browser (tests/gui/test_browser.py):
//   node e2e/combine.mjs URL SCREENSHOT_DIR merged   a merge of two runs: cpu_time:max at the root
//                                                     is the stored value, no % for a statistic
//   node e2e/combine.mjs URL SCREENSHOT_DIR threads  two threads at once: wall_time's total is the
//                                                     elapsed time; no % where rows add up threads
// Prints one JSON object {"checks": [...], "failures": [...], ...values read} and exits 1 on any
// failure.
import { walk } from "./browser.mjs";

const [url, outDir, mode] = process.argv.slice(2);

/** The table of `view` for `metric`: its header labels, the root row's cells, every % cell. */
async function table(page, view, metric) {
  await page.evaluate(([v, m]) => (location.hash = `#v=${v}&m=${encodeURIComponent(m)}`), [view, metric]);
  await page.waitForFunction((v) => document.body.dataset.view === v, view);
  const name = view === "top" ? "top" : view;
  const t = page.locator(`.ttable[data-name="${name}"]`);
  await t.locator(".trow").first().waitFor();
  const heads = await t.locator(".th").allTextContents();
  const root = await t.locator('.trow[data-node="0"] .tnum').allTextContents();
  const cells = await t.locator(".tnum").allTextContents();
  const note = (await page.locator("#subbar .note").allTextContents()).join(" ");
  return { heads: heads.map((h) => h.replace(/ [▲▼]$/, "")), root, percents: cells.filter((c) => c.endsWith("%")).map(parseFloat), note };
}

await walk(url, outDir, async ({ page, check, out }) => {
  check("app loaded", (await page.evaluate(() => document.body.dataset.ready)) === "1", await page.evaluate(() => window.__dctx.error ?? ""));
  if (mode === "merged") {
    const top = await table(page, "top", "cpu_time:max");
    out.root_text = top.root[0];
    out.root_value = await page.evaluate(() => window.__dctx.app.filtered().tree.inc["cpu_time:max"][0]);
    out.status = await page.locator("#status").textContent();
    check("no % column for a statistic of merged inputs", !top.heads.some((h) => h.includes("%")), top.heads.join(","));
    check("no % over 100", top.percents.every((p) => p <= 100), top.percents.join(","));
    check("the note says the statistic does not add up", /cpu_time:max is a statistic across merged inputs and does not add up/.test(top.note), top.note);
    await page.screenshot({ path: `${outDir}/merged-top-down.png` });
    for (const view of ["flat", "bottom"]) {
      const t = await table(page, view, "cpu_time:imbalance");
      check(`${view}: no % column for cpu_time:imbalance`, !t.heads.some((h) => h.includes("%")), t.heads.join(","));
    }
    // the additive metric keeps its shares, none over 100
    const sum = await table(page, "top", "cpu_time");
    check("cpu_time keeps its % columns", sum.heads.includes("incl %") && sum.percents.length > 0, sum.heads.join(","));
    check("no cpu_time % over 100", sum.percents.every((p) => p <= 100), sum.percents.join(","));
    // a statistic cannot size a flame graph: its metric does
    await page.evaluate(() => (location.hash = "#v=flame&m=cpu_time%3Amax"));
    await page.waitForFunction(() => document.body.dataset.view === "flame");
    const boxes = await page.evaluate(() => window.__dctx.app.flame.boxes().length);
    const legend = (await page.locator("#subbar .note").allTextContents()).join(" ");
    check("flame graph sized by cpu_time", boxes > 5 && legend.includes("they are sized by cpu_time"), `${boxes} ${legend}`);
  } else {
    const top = await table(page, "top", "wall_time");
    out.root_text = top.root[0];
    out.root_value = await page.evaluate(() => window.__dctx.app.filtered().tree.inc.wall_time[0]);
    out.thread_values = await page.evaluate(() => {
      const t = window.__dctx.app.filtered().tree;
      const kids = Array.from(t.childIdx.subarray(t.childStart[0], t.childStart[1]));
      return kids.filter((k) => t.frames.kind[t.frame[k]] === "thread").map((k) => t.inc.wall_time[k]);
    });
    out.status = await page.locator("#status").textContent();
    check("the root's % is 100", top.root[1] === "100.0%", top.root.join(","));
    check("no % over 100", top.percents.every((p) => p <= 100), top.percents.join(","));
    check("the note says the total is the elapsed time", /wall_time: the total is the elapsed time/.test(top.note), top.note);
    await page.screenshot({ path: `${outDir}/threads-top-down.png` });
    for (const view of ["flat", "bottom"]) {
      const t = await table(page, view, "wall_time");
      check(`${view}: no % of the elapsed time for rows that add up threads`, !t.heads.some((h) => h.includes("%")), t.heads.join(","));
      check(`${view}: the note says why`, /no % is shown/.test(t.note), t.note);
    }
    await page.evaluate(() => (location.hash = "#v=flame&m=wall_time"));
    await page.waitForFunction(() => document.body.dataset.view === "flame");
    const bx = await page.evaluate(() => window.__dctx.app.flame.boxes());
    const threads = bx.filter((b) => b.label.startsWith("[thread]"));
    check("flame graph draws the threads side by side", threads.length >= 2 && threads.reduce((s, b) => s + b.w, 0) <= bx[0].w + 1, JSON.stringify(threads));
  }
});
