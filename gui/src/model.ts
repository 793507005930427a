// The in-memory calling-context tree the GUI works on, and the arithmetic every view shares.
//
// A Tree keeps parallel typed arrays indexed by node id, with parent[i] < i for every node but
// the root (id 0, parent -1), so a forward loop visits parents before children and a backward loop
// visits children before parents. Every transform (hide kinds, bottom-up, flat, sandwich, diff)
// returns a new Tree with the same invariant.

import { basename } from "./paths";

export const FRAME_KINDS = [
  "root",
  "python",
  "scope",
  "operator",
  "native",
  "gpu_api",
  "kernel",
  "memcpy",
  "memset",
  "backward",
  "module",
  "thread",
  "sync",
  "hlo_op",
  "jax_op",
  "step",
] as const;

export interface Frames {
  kind: string[];
  name: string[];
  file: string[];
  line: number[];
  module: string[];
}

export interface MetricInfo {
  name: string;
  unit: string;
  description: string;
}

export interface Tree {
  n: number;
  parent: Int32Array;
  frame: Int32Array;
  frames: Frames;
  metrics: MetricInfo[];
  inc: Record<string, Float64Array>;
  exc: Record<string, Float64Array>;
  /** CSR children: the children of i are childIdx[childStart[i] .. childStart[i + 1]). */
  childStart: Int32Array;
  childIdx: Int32Array;
  /** For a diff tree: the baseline's values per metric, same node ids. */
  base?: { inc: Record<string, Float64Array>; exc: Record<string, Float64Array> };
  /** For a diff tree: node id in the current / baseline input -> node id here. */
  diffMaps?: { cur: Int32Array; base: Int32Array };
}

/** Metrics whose inclusive value is a maximum, not a sum (they cannot be re-added after a merge). */
export const MAX_METRICS = new Set(["peak_bytes"]);

export function buildChildren(n: number, parent: Int32Array): { childStart: Int32Array; childIdx: Int32Array } {
  const childStart = new Int32Array(n + 1);
  for (let i = 1; i < n; i++) childStart[parent[i] + 1]++;
  for (let i = 0; i < n; i++) childStart[i + 1] += childStart[i];
  const fill = childStart.slice(0, n);
  const childIdx = new Int32Array(Math.max(0, n - 1));
  for (let i = 1; i < n; i++) childIdx[fill[parent[i]]++] = i;
  return { childStart, childIdx };
}

export function makeTree(
  parent: Int32Array,
  frame: Int32Array,
  frames: Frames,
  metrics: MetricInfo[],
  inc: Record<string, Float64Array>,
  exc: Record<string, Float64Array>,
): Tree {
  const n = parent.length;
  const { childStart, childIdx } = buildChildren(n, parent);
  return { n, parent, frame, frames, metrics, inc, exc, childStart, childIdx };
}

export function children(t: Tree, i: number): Int32Array {
  return t.childIdx.subarray(t.childStart[i], t.childStart[i + 1]);
}

export function depthOf(t: Tree): Int32Array {
  const d = new Int32Array(t.n);
  for (let i = 1; i < t.n; i++) d[i] = d[t.parent[i]] + 1;
  return d;
}

export function frameLabel(f: Frames, i: number): string {
  const kind = f.kind[i];
  const name = f.name[i];
  if (kind === "root") return "all";
  if (kind === "python") return `${name} (${basename(f.file[i])}:${f.line[i]})`;
  if (kind === "native" && f.module[i]) return `${name} [${basename(f.module[i])}]`;
  if (kind === "scope" || kind === "module" || kind === "backward" || kind === "thread" || kind === "step")
    return name ? `[${kind}] ${name}` : `[${kind}]`;
  return name;
}

/** A pseudo-kind for the hide list: Python's own import system (`<frozen importlib._bootstrap>`,
 * `_bootstrap_external`, `<frozen zipimport>`), five or more frames between an `import` line and
 * the imported module, the same on every import. Hidden by default, as `deepcontext report` does. */
export const IMPORT_SYSTEM = "import";

export function isImportSystem(f: Frames, i: number): boolean {
  return f.kind[i] === "python" && (f.file[i].startsWith("<frozen importlib.") || f.file[i] === "<frozen zipimport>");
}

export function kindLabel(kind: string): string {
  if (kind === IMPORT_SYSTEM) return "import system";
  return kind === "gpu_api" ? "GPU API" : kind === "hlo_op" ? "HLO op" : kind === "jax_op" ? "JAX op" : kind;
}

/** A key that identifies a frame across two profiles. */
export function frameKey(f: Frames, i: number): string {
  return `${f.kind[i]}\u0001${f.name[i]}\u0001${f.file[i]}\u0001${f.line[i]}\u0001${f.module[i]}`;
}

// ---- metrics ------------------------------------------------------------------------------

/** A metric the user can pick: a stored one, or a ratio of two stored ones. */
export interface MetricSpec {
  id: string;
  label: string;
  unit: string;
  num: string;
  den?: string;
}

/** [numerator, denominator, words, unit (default: the numerator's)] */
const RATIOS: [string, string, string, string?][] = [
  ["gpu_time", "launches", "per launch"],
  ["occupancy", "launches", "per launch", "ratio"],
  ["memcpy_bytes", "memcpy_time", "per ns (GB/s)", "ratio"],
  ["op_time", "op_count", "per call"],
  ["cpu_time", "samples", "per sample"],
  ["alloc_bytes", "alloc_count", "per allocation"],
  ["cycles", "instructions", "per instruction"],
  ["instructions", "cycles", "per cycle"],
];

export function metricSpecs(metrics: MetricInfo[]): MetricSpec[] {
  const out: MetricSpec[] = metrics.map((m) => ({ id: m.name, label: m.name, unit: m.unit, num: m.name }));
  const have = new Map(metrics.map((m) => [m.name, m]));
  for (const [a, b, words, unit] of RATIOS) {
    const ma = have.get(a);
    if (ma && have.has(b))
      out.push({ id: `${a}/${b}`, label: `${a} ${words}`, unit: unit ?? (ma.unit === "count" ? "ratio" : ma.unit), num: a, den: b });
  }
  return out;
}

export function findSpec(specs: MetricSpec[], id: string | undefined): MetricSpec | undefined {
  return specs.find((s) => s.id === id);
}

function ratio(a: Float64Array, b: Float64Array): Float64Array {
  const out = new Float64Array(a.length);
  for (let i = 0; i < a.length; i++) out[i] = b[i] > 0 ? a[i] / b[i] : 0;
  return out;
}

const zeroCache = new WeakMap<Tree, Float64Array>();
function zeros(t: Tree): Float64Array {
  let z = zeroCache.get(t);
  if (!z) {
    z = new Float64Array(t.n);
    zeroCache.set(t, z);
  }
  return z;
}

const derivedCache = new WeakMap<object, Map<string, Float64Array>>();
function cached(owner: object, key: string, make: () => Float64Array): Float64Array {
  let m = derivedCache.get(owner);
  if (!m) {
    m = new Map();
    derivedCache.set(owner, m);
  }
  let v = m.get(key);
  if (!v) {
    v = make();
    m.set(key, v);
  }
  return v;
}

type Values = { inc: Record<string, Float64Array>; exc: Record<string, Float64Array> };

function valuesOf(t: Tree, v: Values, spec: MetricSpec, which: "inc" | "exc"): Float64Array {
  const num = v[which][spec.num] ?? zeros(t);
  if (!spec.den) return num;
  const den = v[which][spec.den] ?? zeros(t);
  return cached(v[which], spec.id, () => ratio(num, den));
}

/** Inclusive values of the metric (for a ratio: ratio of the inclusive sums). */
export function incOf(t: Tree, spec: MetricSpec): Float64Array {
  return valuesOf(t, t, spec, "inc");
}
export function excOf(t: Tree, spec: MetricSpec): Float64Array {
  return valuesOf(t, t, spec, "exc");
}
export function baseIncOf(t: Tree, spec: MetricSpec): Float64Array {
  return t.base ? valuesOf(t, t.base, spec, "inc") : zeros(t);
}
export function baseExcOf(t: Tree, spec: MetricSpec): Float64Array {
  return t.base ? valuesOf(t, t.base, spec, "exc") : zeros(t);
}

/** The additive values that size flame-graph boxes: the numerator for a ratio metric. */
export function widthOf(t: Tree, spec: MetricSpec): Float64Array {
  return t.inc[spec.num] ?? zeros(t);
}

const intFormat = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });

export function formatValue(v: number, unit: string): string {
  if (!isFinite(v)) return "-";
  const a = Math.abs(v);
  if (unit === "ns") {
    if (a >= 1e9) return `${(v / 1e9).toFixed(a >= 1e11 ? 0 : 2)} s`;
    if (a >= 1e6) return `${(v / 1e6).toFixed(a >= 1e8 ? 0 : 2)} ms`;
    if (a >= 1e3) return `${(v / 1e3).toFixed(a >= 1e5 ? 0 : 2)} µs`;
    return `${v.toFixed(0)} ns`;
  }
  if (unit === "bytes") {
    if (a >= 2 ** 30) return `${(v / 2 ** 30).toFixed(2)} GiB`;
    if (a >= 2 ** 20) return `${(v / 2 ** 20).toFixed(2)} MiB`;
    if (a >= 2 ** 10) return `${(v / 2 ** 10).toFixed(2)} KiB`;
    return `${v.toFixed(0)} B`;
  }
  if (unit === "ratio") return v.toPrecision(3);
  if (Number.isInteger(v)) return intFormat.format(v);
  if (a >= 100) return v.toFixed(0);
  return v.toPrecision(3);
}

export function formatPercent(part: number, total: number): string {
  if (!(total > 0)) return "";
  const p = (100 * part) / total;
  return `${p >= 10 || p === 0 ? p.toFixed(1) : p.toFixed(2)}%`;
}
