// Opens a speedscope file in speedscope itself (the npm package's built app, served from
// 127.0.0.1) in headless Chromium, and prints what speedscope made of it as one JSON line:
//   {"title": ..., "toolbar": ..., "profiles": [{"name", "unit", "total"}], "errors": [...]}
// The totals are speedscope's own: the file its Export button writes from the profiles it
// parsed (each profile's endValue there is speedscope's Profile.getTotalWeight()).
//   node tests/interop/node/speedscope_totals.mjs PROFILE.speedscope.json
import http from "node:http";
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "..", "..", "..");

// Our own node_modules first (npm ci here), then the copies the GUI and its bench install.
function locate(pkg, file, fallbacks) {
  for (const dir of [here, ...fallbacks.map((d) => path.join(root, d))]) {
    const candidate = path.join(dir, "node_modules", pkg, file);
    if (fs.existsSync(candidate)) return candidate;
  }
  return null;
}

const release = locate("speedscope", path.join("dist", "release", "index.html"), ["bench/gui"]);
const playwright = locate("playwright-core", "package.json", ["gui"]);
if (!release || !playwright) {
  console.error(`missing npm packages (speedscope: ${!!release}, playwright-core: ${!!playwright}); run: (cd tests/interop/node && npm ci)`);
  process.exit(3);
}
const releaseDir = path.dirname(release);
const { chromium } = createRequire(pathToFileURL(playwright))("playwright-core");

const profile = path.resolve(process.argv[2]);
const types = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".json": "application/json", ".wasm": "application/wasm", ".png": "image/png", ".woff2": "font/woff2", ".ico": "image/x-icon" };
const server = http.createServer((req, res) => {
  const u = new URL(req.url, "http://127.0.0.1");
  let file = "";
  if (u.pathname === "/profile.json") file = profile;
  else {
    const p = path.join(releaseDir, path.normalize(decodeURIComponent(u.pathname)));
    if (p.startsWith(releaseDir + path.sep)) file = p;
  }
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
const title = " - speedscope";
const url = `http://127.0.0.1:${port}/index.html#profileURL=${encodeURIComponent(`http://127.0.0.1:${port}/profile.json`)}`;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const errors = [];
let out;
try {
  const context = await browser.newContext({ acceptDownloads: true, viewport: { width: 1400, height: 900 } });
  const page = await context.newPage();
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => {
    if (m.type() === "error") errors.push(m.text());
  });
  await page.goto(url);
  // loaded: speedscope names the document after the profile and draws its flame chart
  await page.waitForFunction((t) => document.title.includes(t) && document.querySelector("canvas"), title, { timeout: 60000, polling: 50 });
  const toolbar = await page.evaluate(() => {
    const exp = [...document.querySelectorAll("div")].find((d) => d.textContent.trim().endsWith("Export") && !d.querySelector("div"));
    const bar = exp ? exp.parentElement.parentElement : document.body;
    return bar.innerText.replace(/\s+/g, " ").trim();
  });
  const [download] = await Promise.all([
    page.waitForEvent("download", { timeout: 30000 }),
    page.evaluate(() => {
      const exp = [...document.querySelectorAll("div")].find((d) => d.textContent.trim().endsWith("Export") && !d.querySelector("div"));
      if (!exp) throw new Error("no Export button in speedscope's toolbar");
      exp.click();
    }),
  ]);
  const exported = JSON.parse(fs.readFileSync(await download.path(), "utf8"));
  out = {
    title: await page.title(),
    toolbar,
    exporter: exported.exporter,
    profiles: exported.profiles.map((p) => ({ name: p.name, unit: p.unit, total: p.endValue - p.startValue, events: p.events.length })),
    errors,
  };
} finally {
  await browser.close();
  server.close();
}
console.log(JSON.stringify(out));
