// Launches Debian's Chromium headless through playwright-core (no browser download).
import { chromium } from "playwright-core";

export async function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--disable-dev-shm-usage",
    ],
  });
}

/** Opens `url` and waits until the app has loaded the profile and drawn its first view. */
export async function openApp(browser, url, { width = 1400, height = 900 } = {}) {
  const page = await browser.newPage({ viewport: { width, height } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => {
    if (m.type() === "error") errors.push(m.text());
  });
  await page.goto(url);
  await page.waitForFunction(() => document.body.dataset.ready === "1" || document.body.dataset.ready === "error", null, { timeout: 30000 });
  return { page, errors };
}

/**
 * One browser walk against a running `deepcontext view` server: opens the app at `url`, runs
 * `steps({ page, check, out })`, then prints one JSON object {checks, failures, ...out} and exits
 * 1 on any failure. A thrown error (with a screenshot into `outDir`) and the page's own errors
 * are failures too.
 */
export async function walk(url, outDir, steps, viewport = {}) {
  const checks = [];
  const failures = [];
  const out = {};
  const check = (name, ok, detail = "") => {
    checks.push(name);
    if (!ok) failures.push(`${name}${detail ? ": " + detail : ""}`);
  };
  const browser = await launch();
  let page;
  let errors = [];
  try {
    ({ page, errors } = await openApp(browser, url, viewport));
    await steps({ page, check, out });
  } catch (e) {
    failures.push(`exception: ${e.stack || e}`);
    if (page) await page.screenshot({ path: `${outDir}/failure.png` }).catch(() => {});
  } finally {
    await browser.close();
  }
  const pageErrors = errors.filter((e) => !/favicon/.test(e));
  if (pageErrors.length) failures.push(`page errors: ${pageErrors.join(" | ")}`);
  console.log(JSON.stringify({ checks, failures, ...out }));
  process.exit(failures.length ? 1 : 0);
}
