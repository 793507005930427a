// File paths as the GUI shows them. Profiles store absolute paths, which share long prefixes
// (/home/u/venv/lib/python3.11/site-packages/...); every view shows the short form from
// displayPath, with the full path on hover.

export function basename(p: string): string {
  const k = p.lastIndexOf("/");
  return k >= 0 ? p.slice(k + 1) : p;
}

/** Collapses "." and ".." segments and repeated slashes of a "/"-separated path. */
export function normalizePath(p: string): string {
  const abs = p.startsWith("/");
  const out: string[] = [];
  for (const s of p.split("/")) {
    if (!s || s === ".") continue;
    if (s === ".." && out.length && out[out.length - 1] !== "..") out.pop();
    else if (s !== ".." || !abs) out.push(s);
  }
  return (abs ? "/" : "") + out.join("/");
}

/** Where the profiled program ran: what displayPath and fullPath need. */
export interface PathContext {
  /** its working directory ("" when unknown): relative paths in frames are relative to it */
  cwd: string;
  /** folders whose files are shown relative to them, most specific first */
  roots: string[];
}

/**
 * The context from a profile's metadata: the program's folder (its argv[0], from `command`,
 * resolved against `cwd`), then the working directory. "/" is never a root: everything would be
 * "relative" to it.
 */
export function pathContext(meta: Record<string, string>): PathContext {
  const cwd = meta.cwd?.startsWith("/") ? normalizePath(meta.cwd) : "";
  let argv0 = "";
  try {
    const cmd: unknown = JSON.parse(meta.command ?? "[]");
    if (Array.isArray(cmd) && typeof cmd[0] === "string") argv0 = cmd[0];
  } catch {
    /* not JSON: no program path */
  }
  const roots: string[] = [];
  // "-c" or an empty argv[0] names no file
  if (argv0 && !argv0.startsWith("-") && (argv0.startsWith("/") || cwd)) {
    const program = normalizePath(argv0.startsWith("/") ? argv0 : `${cwd}/${argv0}`);
    roots.push(program.slice(0, program.lastIndexOf("/")));
  }
  if (cwd) roots.push(cwd);
  return { cwd, roots: [...new Set(roots)].filter((r) => r.startsWith("/") && r !== "/") };
}

/** The file's absolute path (a relative one, such as the main script's, is relative to the
 * program's working directory); names such as `<frozen runpy>` as given. */
export function fullPath(file: string, ctx: PathContext): string {
  if (!file || file.startsWith("/") || file.startsWith("<") || !ctx.cwd) return file;
  return normalizePath(`${ctx.cwd}/${file}`);
}

const PACKAGE_DIRS = ["/site-packages/", "/dist-packages/"];
/** CPython's standard library: <prefix>/lib/python3.11/... (site-packages is matched first). */
const STDLIB = /\/lib\/python\d+\.\d+t?\/(.+)$/;

/**
 * The short form of a source file's path, which every view shows (the full path on hover):
 * installed packages as `torch/nn/modules/linear.py`, the standard library as
 * `<stdlib>/json/decoder.py`, the program's own files relative to its folder (or the working
 * directory); anything else, and names such as `<frozen runpy>`, as given.
 */
export function displayPath(file: string, ctx: PathContext): string {
  const full = fullPath(file, ctx);
  if (!full.startsWith("/")) return file;
  const k = Math.max(...PACKAGE_DIRS.map((d) => full.lastIndexOf(d)));
  if (k >= 0) return full.slice(full.indexOf("-packages/", k) + "-packages/".length);
  const std = STDLIB.exec(full);
  if (std) return `<stdlib>/${std[1]}`;
  for (const r of ctx.roots) if (full.startsWith(r + "/")) return full.slice(r.length + 1);
  return full;
}
