// End-to-end walk through every view against a running `deepcontext view` server:
//   node e2e/views.mjs URL SCREENSHOT_DIR
// The profile must come from tests/gui/programs/work.py (variant b) with a variant-a baseline.
// Prints one JSON object {"checks": [...], "failures": [...]} and exits 1 on any failure.
import { launch, openApp } from "./browser.mjs";

const [url, outDir] = process.argv.slice(2);
const checks = [];
const failures = [];
function check(name, ok, detail = "") {
  checks.push(name);
  if (!ok) failures.push(`${name}${detail ? ": " + detail : ""}`);
}

const browser = await launch();
let page;
let errors = [];
try {
  ({ page, errors } = await openApp(browser, url));
  check("app loaded", (await page.evaluate(() => document.body.dataset.ready)) === "1", await page.evaluate(() => window.__dctx.error ?? ""));
  const shot = (name) => page.screenshot({ path: `${outDir}/${name}.png` });
  const hash = () => page.evaluate(() => decodeURIComponent(location.hash));
  const boxes = () => page.evaluate(() => window.__dctx.app.flame.boxes());
  const canvasBox = async () => page.locator('[data-pane="flame"] canvas').boundingBox();

  // 1. flame graph
  let bx = await boxes();
  check("flame graph drew boxes", bx.length > 5, String(bx.length));
  const hotBox = bx.find((b) => b.label.startsWith("square_sum"));
  check("flame graph shows the hot function", !!hotBox);
  await shot("flame");

  // hover shows the tooltip
  const cb = await canvasBox();
  await page.mouse.move(cb.x + hotBox.x + hotBox.w / 2, cb.y + hotBox.y + 8);
  const tip = await page.locator("#tooltip").textContent();
  check("hover shows details", tip.includes("square_sum") && tip.includes("cpu_time"), tip);

  // 2. click to focus (zoom)
  const computeBox = bx.find((b) => b.label.startsWith("compute"));
  await page.mouse.click(cb.x + computeBox.x + computeBox.w / 2, cb.y + computeBox.y + 8);
  await page.waitForFunction(() => location.hash.includes("f="));
  bx = await boxes();
  const focused = bx.find((b) => b.label.startsWith("compute"));
  check("click focuses the subtree", focused && Math.abs(focused.w - (await canvasBox()).width) < 2, JSON.stringify(focused));
  check("focus hides the other branch", !bx.some((b) => b.label.startsWith("sort_strings")));
  check("breadcrumb names the focus", (await page.locator("#subbar .crumbs").textContent()).includes("compute"));
  await shot("flame-focus");

  // 3. the view survives a reload
  const before = await hash();
  await page.reload();
  await page.waitForFunction(() => document.body.dataset.ready === "1");
  check("state kept in the URL", (await hash()) === before, `${before} vs ${await hash()}`);
  bx = await boxes();
  check("focus restored after reload", bx.some((b) => b.label.startsWith("compute") && b.x === 0 && b.w > 500));
  await page.click("#subbar button:has-text('Reset zoom')");
  check("reset zoom", !(await hash()).includes("f="));

  // 4. regex search
  await page.fill("#search", "sort_str|genexpr");
  await page.press("#search", "Enter");
  await page.waitForFunction(() => location.hash.includes("q="));
  const legend = await page.locator("#subbar .legend").textContent();
  check("search reports matches", /[1-9]\d* matching nodes/.test(legend), legend);
  await shot("flame-search");
  await page.fill("#search", "");
  await page.press("#search", "Enter");

  // 5. hide frames by kind
  await page.click("#hide summary");
  await page.check('#kinds input[data-kind="thread"]');
  await page.waitForFunction(() => /[#&]h=[^&]*thread/.test(decodeURIComponent(location.hash)));
  bx = await boxes();
  check("hiding a kind removes its frames", !bx.some((b) => b.label.startsWith("[thread]")));
  await page.uncheck('#kinds input[data-kind="thread"]');
  await page.waitForFunction(() => !location.hash.includes("h="));
  // Python's import system is hidden by default: the imported module sits under its import line
  const imp = page.locator('#kinds input[data-kind="import"]');
  check("import system listed, hidden by default", (await imp.count()) === 1 && (await imp.isChecked()));
  const frozen = (b) => b.label.includes("<frozen importlib.");
  bx = await boxes();
  check("no import-system frame drawn by default", !bx.some(frozen), bx.filter(frozen).map((b) => b.label).join(", "));
  check("the imported module's work is drawn", bx.some((b) => b.label.startsWith("<module> (tables.py")));
  await imp.uncheck();
  await page.waitForFunction(() => location.hash.includes("h="));
  bx = await boxes();
  check("showing the import system draws its frames", bx.some(frozen));
  await imp.check();
  await page.click("#hide summary");

  // 6. top-down table: sort and expand
  await page.click('#tabs button[data-view="top"]');
  const top = page.locator('.ttable[data-name="top"]');
  await top.waitFor();
  const rows0 = parseInt(await top.getAttribute("data-rows"), 10);
  check("top-down shows the hot path expanded", rows0 > 5, String(rows0));
  // In variant b, compute() and sort_strings(4) take about the same CPU time: either may lead the hot path.
  check("top-down lists the hot function", (await top.locator(".trow .label", { hasText: /square_sum|sort_strings/ }).count()) > 0);
  await top.locator('.th[data-col="exc"]').click();
  check("sort by exclusive", (await hash()).includes("s=exc") && (await top.locator(".th.sorted").getAttribute("data-col")) === "exc");
  // collapse then expand the first expandable row
  const firstCaret = top.locator(".trow .caret", { hasText: "▾" }).first();
  await firstCaret.click();
  const rows1 = parseInt(await top.getAttribute("data-rows"), 10);
  await top.locator(".trow .caret", { hasText: "▸" }).first().click();
  const rows2 = parseInt(await top.getAttribute("data-rows"), 10);
  check("collapse and expand", rows1 < rows0 && rows2 > rows1, `${rows0} ${rows1} ${rows2}`);
  await shot("top-down");

  // 7. bottom-up
  await page.click('#tabs button[data-view="bottom"]');
  const bottom = page.locator('.ttable[data-name="bottom"]');
  await bottom.waitFor();
  check("bottom-up lists self-time frames", (await bottom.locator(".trow .label", { hasText: "square_sum" }).count()) > 0);
  await shot("bottom-up");

  // 8. flat, then sandwich by double-click
  await page.click('#tabs button[data-view="flat"]');
  const flatT = page.locator('.ttable[data-name="flat"]');
  await flatT.waitFor();
  check("flat lists frames", parseInt(await flatT.getAttribute("data-rows"), 10) > 5);
  await shot("flat");
  await flatT.locator(".trow .label", { hasText: /^sort_strings/ }).first().dblclick();
  await page.waitForFunction(() => location.hash.includes("v=sandwich"));
  const callers = page.locator('.ttable[data-name="callers"]');
  const callees = page.locator('.ttable[data-name="callees"]');
  check("sandwich shows callers", (await callers.locator(".trow .label", { hasText: /^main/ }).count()) > 0);
  check("sandwich shows callees", (await callees.locator(".trow .label", { hasText: "genexpr" }).count()) > 0);
  await shot("sandwich");

  // 9. source view at the hot line, from a node's details
  await page.click('#tabs button[data-view="flame"]');
  bx = await boxes();
  const sq = bx.find((b) => b.label.startsWith("square_sum"));
  const cb2 = await canvasBox();
  await page.mouse.click(cb2.x + sq.x + sq.w / 2, cb2.y + sq.y + 8);
  await page.mouse.move(0, 0);
  await page.click('#details button:has-text("Source")');
  await page.waitForFunction(() => location.hash.includes("v=source"));
  await page.locator(".srchost .cm-editor").waitFor();
  const target = await page.locator(".cm-target-line").textContent();
  check("source view opens at the hot line", target.includes("s += i * i"), target);
  check("source gutter shows metrics", (await page.locator(".cm-metric-gutter .inc").count()) > 0);
  await shot("source");

  // 10. metric selector with a derived metric
  const opts = await page.locator("#metric option").allTextContents();
  check("derived metric offered", opts.includes("cpu_time per sample"), opts.join(","));
  await page.selectOption("#metric", "wall_time");
  check("metric in the URL", (await hash()).includes("m=wall_time"));

  // 11. diff (of the whole tree: reset the zoom first)
  await page.selectOption("#metric", "cpu_time");
  await page.click('#tabs button[data-view="flame"]');
  if (await page.locator("#subbar button:has-text('Reset zoom')").count()) await page.click("#subbar button:has-text('Reset zoom')");
  await page.click('#tabs button[data-view="diff"]');
  await page.locator('.ttable[data-name="diff"]').waitFor();
  await page.waitForFunction(() => document.querySelector(".changes table") !== null);
  const changes = await page.locator(".changes td.p").allTextContents();
  check("diff lists changed paths", changes.some((c) => c.includes("sort_strings") || c.includes("genexpr")), changes.slice(0, 5).join(" | "));
  const diffBoxes = await page.evaluate(() => window.__dctx.app.diffFlame.boxes().length);
  check("diff flame graph drawn", diffBoxes > 5, String(diffBoxes));
  const ups = await page.locator('.ttable[data-name="diff"] .tnum.up').count();
  check("diff table marks growth", ups > 0, String(ups));
  const importsLine = await page.locator(".changes .imports").textContent();
  check("diff says import time is left out of the changes", /^Import time is left out of these changes/.test(importsLine ?? ""), importsLine ?? "");
  await shot("diff");

  // 12. findings (the test registers a custom rule naming square_sum)
  await page.click('#tabs button[data-view="findings"]');
  await page.locator(".finding, [data-pane=findings] .msg:not(:has-text('running'))").first().waitFor();
  const cards = await page.locator(".finding").count();
  check("findings listed", cards > 0, String(cards));
  check("finding names its rule", (await page.locator(".finding").first().textContent()).includes("gui-test-hot-function"));
  await shot("findings");
  await page.locator('.finding button:has-text("Show in flame graph")').first().click();
  await page.waitForFunction(() => location.hash.includes("v=flame"));
  check("a finding links to its node", (await hash()).includes("f="));
  bx = await boxes();
  check("the finding's node is focused", bx.some((b) => b.label.startsWith("square_sum") && b.x === 0 && b.w > 500));

  // 13. the back button returns to the previous view
  await page.goBack();
  await page.waitForFunction(() => document.body.dataset.view === "findings");
  check("back button restores the view", true);
} catch (e) {
  failures.push(`exception: ${e.stack || e}`);
  if (page) await page.screenshot({ path: `${outDir}/failure.png` }).catch(() => {});
} finally {
  await browser.close();
}
const pageErrors = errors.filter((e) => !/favicon/.test(e));
if (pageErrors.length) failures.push(`page errors: ${pageErrors.join(" | ")}`);
console.log(JSON.stringify({ checks, failures }));
process.exit(failures.length ? 1 : 0);
