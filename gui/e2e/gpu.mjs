// The GUI on a GPU profile (CUPTI traffic recorded on an H200, replayed into a real profile):
//   node e2e/gpu.mjs URL SCREENSHOT_DIR
// Prints {"checks": [...], "failures": [...]} and exits 1 on any failure.
import { launch, openApp } from "./browser.mjs";

const [url, outDir] = process.argv.slice(2);
const checks = [];
const failures = [];
const check = (name, ok, detail = "") => {
  checks.push(name);
  if (!ok) failures.push(`${name}${detail ? ": " + detail : ""}`);
};
const browser = await launch();
let errors = [];
try {
  const o = await openApp(browser, url);
  const page = o.page;
  errors = o.errors;
  const metric = await page.locator("#metric").inputValue();
  check("GPU time is the default metric", metric === "gpu_time", metric);
  const kinds = await page.evaluate(() => {
    const app = window.__dctx.app;
    const t = app.topShown().tree;
    return [...new Set(app.flame.boxes().map((b) => t.frames.kind[t.frame[b.node]]))];
  });
  check("kernels, operators and Python frames drawn", ["kernel", "operator", "python"].every((k) => kinds.includes(k)), kinds.join(","));
  await page.screenshot({ path: `${outDir}/gpu-flame.png` });
  const opts = await page.locator("#metric option").allTextContents();
  check("gpu_time per launch offered", opts.includes("gpu_time per launch"), opts.join(","));
  await page.selectOption("#metric", "gpu_time/launches");
  await page.click('#tabs button[data-view="flat"]');
  const flat = page.locator('.ttable[data-name="flat"]');
  await flat.waitFor();
  await flat.locator('.th[data-col="exc"]').click();
  const first = await flat.locator(".trow").nth(1).locator(".label").textContent();
  const perLaunch = await flat.locator(".trow").nth(1).locator(".tnum").first().textContent();
  check("flat view ranks kernels by time per launch", /\d/.test(perLaunch), `${first} ${perLaunch}`);
  await page.screenshot({ path: `${outDir}/gpu-flat-per-launch.png` });
  // hide kernels: their time goes to the launching API frames
  await page.click('#tabs button[data-view="flame"]');
  await page.selectOption("#metric", "gpu_time");
  await page.click("#hide summary");
  await page.check('#kinds input[data-kind="kernel"]');
  await page.click("#hide summary");
  const kinds2 = await page.evaluate(() => {
    const app = window.__dctx.app;
    const t = app.topShown().tree;
    return [...new Set(app.flame.boxes().map((b) => t.frames.kind[t.frame[b.node]]))];
  });
  check("hiding kernels removes them", !kinds2.includes("kernel") && kinds2.includes("gpu_api"), kinds2.join(","));
  await page.screenshot({ path: `${outDir}/gpu-flame-no-kernels.png` });
} catch (e) {
  failures.push(`exception: ${e.stack || e}`);
} finally {
  await browser.close();
}
const pageErrors = errors.filter((e) => !/favicon/.test(e));
if (pageErrors.length) failures.push(`page errors: ${pageErrors.join(" | ")}`);
console.log(JSON.stringify({ checks, failures }));
process.exit(failures.length ? 1 : 0);
