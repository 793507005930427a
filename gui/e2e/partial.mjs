// A partial profile (a checkpoint of a program that was killed, tests/gui/programs/partial.py)
// against a running `deepcontext view` server: every view shows the banner that says so.
//   node e2e/partial.mjs URL SCREENSHOT_DIR
// Prints one JSON object {"checks": [...], "failures": [...], "banner": "..."} and exits 1 on any
// failure.
import { launch, openApp } from "./browser.mjs";

const [url, outDir] = process.argv.slice(2);
const checks = [];
const failures = [];
let banner = "";
function check(name, ok, detail = "") {
  checks.push(name);
  if (!ok) failures.push(`${name}${detail ? ": " + detail : ""}`);
}

const browser = await launch();
let page;
let errors = [];
try {
  ({ page, errors } = await openApp(browser, url));
  check("app loaded", (await page.evaluate(() => document.body.dataset.ready)) === "1");
  const b = page.locator("#banner");
  banner = (await b.count()) ? await b.textContent() : "";
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
} catch (e) {
  failures.push(`exception: ${e.stack || e}`);
  if (page) await page.screenshot({ path: `${outDir}/failure.png` }).catch(() => {});
} finally {
  await browser.close();
}
const pageErrors = errors.filter((e) => !/favicon/.test(e));
if (pageErrors.length) failures.push(`page errors: ${pageErrors.join(" | ")}`);
console.log(JSON.stringify({ checks, failures, banner }));
process.exit(failures.length ? 1 : 0);
