// A partial profile (a checkpoint of a program that was killed, tests/gui/programs/partial.py)
// against a running `deepcontext view` server: every view shows the banner that says so.
//   node e2e/partial.mjs URL SCREENSHOT_DIR
// Prints one JSON object {"checks": [...], "failures": [...], "banner": "..."} and exits 1 on any
// failure.
import { walk } from "./browser.mjs";

const [url, outDir] = process.argv.slice(2);

await walk(url, outDir, async ({ page, check, out }) => {
  check("app loaded", (await page.evaluate(() => document.body.dataset.ready)) === "1");
  const b = page.locator("#banner");
  const banner = (out.banner = (await b.count()) ? await b.textContent() : "");
  check("banner says the profile is partial and up to when", /^Partial profile: the program did not finish; data up to \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \((less than 1|about \d+) s after the start\)\.$/.test(banner), banner);
  const views = await page.$$eval("#tabs button:not([disabled])", (bs) => bs.map((x) => x.dataset.view));
  check("every view offered", views.length >= 7, views.join(","));
  for (const v of views) {
    await page.click(`#tabs button[data-view="${v}"]`);
    await page.waitForFunction((w) => document.body.dataset.view === w, v);
    const box = await b.boundingBox();
    const main = await page.locator("#main").boundingBox();
    check(`banner shown on ${v}`, (await b.isVisible()) && box && box.height > 10 && box.y + box.height <= main.y + 0.5, JSON.stringify({ box, main }));
    if (v === "flame") await page.screenshot({ path: `${outDir}/partial-flame.png` });
  }
});
