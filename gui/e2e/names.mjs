// The tree tables' name column and the short file paths, against a running `deepcontext view`
// server on a profile of tests/gui/programs/deep.py (a finished run):
//   node e2e/names.mjs URL SCREENSHOT_DIR
// Prints one JSON object {"checks": [...], "failures": [...], "widths": {...}} and exits 1 on any
// failure.
import { walk } from "./browser.mjs";

const [url, outDir] = process.argv.slice(2);
const VW = 1280;
const near = (a, b) => Math.abs(a - b) <= 2;

await walk(url, outDir, async ({ page, check, out }) => {
  const widths = (out.widths = {});
  check("app loaded", (await page.evaluate(() => document.body.dataset.ready)) === "1");
  check("no partial-profile banner for a finished run", await page.locator("#banner").isHidden());
  const hash = () => page.evaluate(() => decodeURIComponent(location.hash));
  const nameHeader = (table) => page.locator(`.ttable[data-name="${table}"] .th[data-col="name"]`);
  const nameWidth = async (table) => (await nameHeader(table).boundingBox()).width;
  // rows whose name is cut (ellipsis): the name cell's content is wider than the cell
  const cutRows = (table) =>
    page.evaluate((t) => {
      const cut = [];
      for (const n of document.querySelectorAll(`.ttable[data-name="${t}"] .trow .tname`))
        if (n.scrollWidth > n.clientWidth + 1) cut.push(n.textContent);
      return cut;
    }, table);

  // 1. wide by default: half the window
  await page.click('#tabs button[data-view="top"]');
  await page.locator('.ttable[data-name="top"]').waitFor();
  widths.default = await nameWidth("top");
  check("name column is half the window by default", near(widths.default, VW / 2), String(widths.default));
  const deepest = page.locator('.ttable[data-name="top"] .trow .label', { hasText: /^descend_through_the_layers/ });
  check("the hot path is expanded 20 calls deep", (await deepest.count()) >= 20, String(await deepest.count()));
  await page.screenshot({ path: `${outDir}/top-down-names.png` });

  // 2. drag the handle on the header: the column follows, and the click does not sort
  const handle = nameHeader("top").locator(".colresize");
  check("name header has a drag handle", (await handle.count()) === 1);
  const before = await hash();
  const hb = await handle.boundingBox();
  await page.mouse.move(hb.x + hb.width / 2, hb.y + hb.height / 2);
  await page.mouse.down();
  await page.mouse.move(hb.x + hb.width / 2 + 120, hb.y + hb.height / 2, { steps: 5 });
  await page.mouse.move(hb.x + hb.width / 2 + 240, hb.y + hb.height / 2, { steps: 5 });
  await page.mouse.up();
  widths.dragged = await nameWidth("top");
  check("dragging widens the name column", near(widths.dragged, widths.default + 240), `${widths.default} -> ${widths.dragged}`);
  check("dragging does not sort", (await hash()) === before, `${before} vs ${await hash()}`);
  const cut = await cutRows("top");
  check("wide enough, no name is cut at depth", cut.length === 0, cut.join(" | "));
  const rowW = await page.locator('.ttable[data-name="top"] .trow .tname').first().evaluate((e) => e.getBoundingClientRect().width);
  check("the rows' name cells follow the header", near(rowW, widths.dragged), `${rowW} vs ${widths.dragged}`);
  await page.screenshot({ path: `${outDir}/top-down-names-wide.png` });

  // 3. the width is kept in the other views and across a reload
  await page.click('#tabs button[data-view="bottom"]');
  await page.locator('.ttable[data-name="bottom"]').waitFor();
  check("bottom-up keeps the width", near(await nameWidth("bottom"), widths.dragged), String(await nameWidth("bottom")));
  await page.click('#tabs button[data-view="flat"]');
  await page.locator('.ttable[data-name="flat"]').waitFor();
  check("flat keeps the width", near(await nameWidth("flat"), widths.dragged));
  await page.reload();
  await page.waitForFunction(() => document.body.dataset.ready === "1");
  check("a reload keeps the width", near(await nameWidth("flat"), widths.dragged), String(await nameWidth("flat")));
  // a double-click on the handle goes back to the default
  await nameHeader("flat").locator(".colresize").dblclick();
  check("double-click restores the default", near(await nameWidth("flat"), widths.default), String(await nameWidth("flat")));

  // 4. source view: short paths, the full path on hover
  await page.click('#tabs button[data-view="source"]');
  await page.locator(".srchost .cm-editor").waitFor();
  const files = await page.$$eval(".files div", (ds) => ds.map((d) => ({ file: d.dataset.file, title: d.title, text: d.lastChild.textContent })));
  // the title is the full path (the main script's frames name it relative to the working directory)
  const entry = (suffix) => files.find((f) => f.title.endsWith(suffix));
  const want = [
    ["/deep.py", "deep.py"],
    ["/site-packages/squares/core.py", "squares/core.py"],
    ["/json/encoder.py", "<stdlib>/json/encoder.py"],
  ];
  for (const [suffix, text] of want) {
    const e = entry(suffix);
    check(`source list shows ${text}`, e && e.text === text && e.title.startsWith("/") && (e.title === e.file || e.title.endsWith("/" + e.file)), JSON.stringify(e ?? files));
  }
  check("no listed file shows a full path", files.every((f) => !f.text.startsWith("/")), files.map((f) => f.text).join(", "));
  const legend = await page.locator("#subbar .legend").textContent();
  const shown = files.find((f) => f.file === decodeURIComponent(new URL(page.url()).hash).match(/file=([^&]*)/)?.[1]) ?? files[0];
  check("the legend names the file by its short path", legend.startsWith(shown.text + ":"), legend);
  await page.screenshot({ path: `${outDir}/source-paths.png` });

  // 5. details panel: short path, full path on hover
  await page.click('#tabs button[data-view="top"]');
  await deepest.last().click();
  const where = page.locator("#details .where");
  const whereText = await where.textContent();
  check("details show the short path", /deep\.py:\d+/.test(whereText) && !whereText.includes("/deep.py"), whereText);
  check("details' full path on hover", /^\/.*\/deep\.py:\d+$/.test(await where.getAttribute("title")), await where.getAttribute("title"));
}, { width: VW, height: 800 });
