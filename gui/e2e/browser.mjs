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
