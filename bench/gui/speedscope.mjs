// The side-by-side tool of the GUI benchmark: speedscope (the npm package's built app), served
// from 127.0.0.1 with the same profile converted to its evented format, in the same headless
// Chromium. node bench/gui/speedscope.mjs PROFILE.json [REPEATS]   (run from gui/)
// Measures navigation -> first view drawn (its document title names the loaded profile), and the
// switch to its aggregated "Left Heavy" flame graph, to the next painted frame.
import http from "node:http";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { launch } from "../../gui/e2e/browser.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const release = path.join(here, "node_modules", "speedscope", "dist", "release");
const [profile, repeatsArg] = process.argv.slice(2);
const repeats = parseInt(repeatsArg || "3", 10);
const types = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".json": "application/json", ".wasm": "application/wasm", ".png": "image/png", ".woff2": "font/woff2", ".ico": "image/x-icon" };
const server = http.createServer((req, res) => {
  const u = new URL(req.url, "http://127.0.0.1");
  let file = u.pathname === "/profile.json" ? profile : path.join(release, path.normalize(u.pathname).replace(/^([/\\])+/, ""));
  if (!file.startsWith(release) && file !== profile) file = "";
  fs.readFile(file, (err, data) => {
    if (err) {
      res.writeHead(404);
      res.end();
      return;
    }
    res.writeHead(200, { "Content-Type": types[path.extname(file)] || "application/octet-stream" });
    res.end(data);
  });
});
await new Promise((r) => server.listen(0, "127.0.0.1", r));
const port = server.address().port;
const url = `http://127.0.0.1:${port}/index.html#profileURL=${encodeURIComponent(`http://127.0.0.1:${port}/profile.json`)}&title=bench`;
const browser = await launch();
const first = [];
const leftHeavy = [];
for (let r = 0; r < repeats; r++) {
  const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
  await page.goto(url);
  await page.waitForFunction(() => document.title.includes("bench") && document.querySelector("canvas"), null, { timeout: 300000, polling: 20 });
  first.push(await page.evaluate(() => new Promise((res) => requestAnimationFrame(() => setTimeout(() => res(performance.now()), 0)))));
  const t = await page.evaluate(async () => {
    const b = [...document.querySelectorAll("div")].find((d) => d.textContent.endsWith("Left Heavy") && !d.querySelector("div"));
    if (!b) return -1;
    const t0 = performance.now();
    b.click();
    await new Promise((res) => requestAnimationFrame(() => setTimeout(res, 0)));
    return performance.now() - t0;
  });
  leftHeavy.push(t);
  await page.close();
}
await browser.close();
server.close();
const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(JSON.stringify({ firstView: { median: +med(first).toFixed(1), all: first.map((x) => +x.toFixed(1)) }, leftHeavy: { median: +med(leftHeavy).toFixed(1), all: leftHeavy.map((x) => +x.toFixed(1)) } }));
