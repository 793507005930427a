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
  /** Every node lies in one thread (a top-down tree), so a node's wall time is a part of the
   * run's elapsed time; false for trees whose rows add up several threads (bottom-up, flat,
   * sandwich, threads hidden). */
  perThread: boolean;
  /** The run's elapsed time (meta elapsed_ns; merged: the inputs' added up) when wall time was
   * sampled and the profile records it: the root's wall_time is then this, not the threads' sum. */
  elapsed: number | null;
}

// ---- how values combine ---------------------------------------------------------------------

/**
 * How the values of a metric combine when a view puts several nodes' values into one row
 * (hidden frames spliced into their parent, merged siblings, bottom-up, flat, sandwich, source
 * lines). The one definition every transform follows; it mirrors `combine_rule` of
 * python/deepcontext/reader.py (the CLI's report, exports and diff), plus peak_bytes:
 * - "sum": values add up (times, bytes, counts, a merge's M:mean);
 * - "per_thread": wall time adds up along one thread, but the threads run at once: the whole is
 *   the run's elapsed time, and a row that adds up several threads is no share of it;
 * - "stored": a merge's M:min/max/std/imbalance across inputs; the stored value holds where a row
 *   is one stored node (or several of which one measured M), NaN ("n/a") where several did;
 * - "max": the inclusive value is a maximum (peak_bytes), taken again when rows combine.
 */
export type Combine = "sum" | "per_thread" | "stored" | "max";

/** The statistics across inputs that `deepcontext merge` stores as metrics `M:<stat>`. */
export const MERGE_STATS = ["mean", "min", "max", "std", "imbalance"] as const;
const ADDITIVE_STATS: readonly string[] = ["mean"];
const MAX_METRICS: readonly string[] = ["peak_bytes"];

/** The metric a merge statistic is of (`cpu_time` for `cpu_time:max`), else null. */
export function statBase(name: string): string | null {
  const i = name.lastIndexOf(":");
  if (i <= 0) return null;
  return (MERGE_STATS as readonly string[]).includes(name.slice(i + 1)) ? name.slice(0, i) : null;
}

/** How `name` combines, given the names of the profile's metrics. */
export function combineRule(name: string, metricNames: readonly string[]): Combine {
  const base = statBase(name);
  if (base !== null && metricNames.includes(base)) return ADDITIVE_STATS.includes(name.slice(base.length + 1)) ? "sum" : "stored";
  if (name === "wall_time") return "per_thread";
  if (MAX_METRICS.includes(name)) return "max";
  return "sum";
}

/** Whether rows of the metric are the sum of their parts (inclusive = exclusive + children). */
export function addsUp(rule: Combine): boolean {
  return rule === "sum" || rule === "per_thread";
}

export function ruleOf(t: { metrics: MetricInfo[] }, name: string): Combine {
  return combineRule(name, t.metrics.map((m) => m.name));
}

/** The run's elapsed time from a profile's meta (`elapsed_ns`; for a merged profile the inputs'
 * added up, as wall time adds up across them), or null where it is not recorded. */
export function elapsedNs(meta: Record<string, string>): number | null {
  if ("merged_inputs" in meta) {
    let inputs: { meta?: Record<string, string> }[];
    try {
      inputs = JSON.parse(meta.merged_inputs);
    } catch {
      return null;
    }
    if (!Array.isArray(inputs) || !inputs.length) return null;
    let sum = 0;
    for (const i of inputs) {
      const e = elapsedNs(i?.meta ?? {});
      if (e === null) return null;
      sum += e;
    }
    return sum;
  }
  const v = Number(meta.elapsed_ns);
  return meta.elapsed_ns !== undefined && Number.isFinite(v) && v > 0 ? v : null;
}

/** Sets a loaded profile's wholes: the root's wall_time is the elapsed time where the profile
 * records it (the root's subtree holds the threads' wall times added up). */
export function setWholes(t: Tree, meta: Record<string, string>): Tree {
  const elapsed = elapsedNs(meta);
  for (const m of t.metrics) {
    const inc = t.inc[m.name];
    if (ruleOf(t, m.name) !== "per_thread" || !inc || !(inc[0] > 0) || elapsed === null) continue;
    t.elapsed = elapsed;
    inc[0] = elapsed;
  }
  return t;
}

/** Per node of `t`: whether it (`which` = "exc") or its subtree ("inc") measured the metric a
 * "stored" statistic is of. A node where no input measured it adds nothing to any input's value,
 * so a row that combines it with one measured node keeps that node's statistic exactly. */
function liveOf(t: Tree, name: string, which: "inc" | "exc"): Float64Array {
  const base = statBase(name);
  return (base !== null ? t[which][base] : undefined) ?? t[which][name];
}

/**
 * Accumulates nodes' values of one metric into rows, by the metric's rule: the one place where
 * the GUI combines values. Rows start at 0; `add(out, row, node, v)` puts node `node` of `from`
 * (value `v`, by default its `which` value) into `out[row]`.
 */
export class Combiner {
  readonly rule: Combine;
  private live: Float64Array | null;
  private seen = new Map<number, number>();

  constructor(from: Tree, name: string, which: "inc" | "exc") {
    this.rule = ruleOf(from, name);
    this.live = this.rule === "stored" ? liveOf(from, name, which) : null;
  }

  add(out: number[] | Float64Array, row: number, node: number, v: number): void {
    if (this.rule === "max") {
      if (v > out[row]) out[row] = v;
    } else if (this.live) {
      if (this.live[node] === 0) return; // not measured there: adds nothing
      const k = (this.seen.get(row) ?? 0) + 1;
      this.seen.set(row, k);
      out[row] = k === 1 ? v : NaN;
    } else out[row] += v;
  }
}

/** Why a "stored" statistic reads n/a in a row (the cells' tooltip). */
export function notCombinableWhy(name: string): string {
  return `${name} is a statistic across merged profiles' inputs: it does not add up, so a row that combines several measured nodes (spliced frames, merged paths, bottom-up, flat and source-line rows) has no value`;
}

/**
 * The whole a share (%) of `spec` is of, or null where a share means nothing: the root's value of
 * `whole` for a metric that adds up (for wall_time the elapsed time, where recorded), none for a
 * merge statistic (a node's max is no part of the root's max), none for wall time in rows that
 * add up several threads (`rows` not per thread).
 */
export function shareTotal(whole: Tree, spec: MetricSpec, rows: { perThread: boolean } = whole): number | null {
  const rule = ruleOf(whole, spec.num);
  if (rule === "stored" || (rule === "per_thread" && !rows.perThread)) return null;
  const v = whole.inc[spec.num]?.[0] ?? 0;
  return v > 0 ? v : null;
}

/** What a reader of a view must know about how `name` combines (as `deepcontext report`'s notes),
 * or null. `rows`: the view's tree. */
export function combineNote(whole: Tree, name: string, rows: { perThread: boolean } = whole): string | null {
  const rule = ruleOf(whole, name);
  if (rule === "stored") return `${name} is a statistic across merged inputs and does not add up: rows that combine several measured nodes read n/a, and no % is shown.`;
  if (rule !== "per_thread" || !(whole.inc[name]?.[0] > 0)) return null;
  if (whole.elapsed === null) return `${name}: this profile does not record the elapsed time (elapsed_ns); its total adds up the threads' wall times.`;
  const e = formatValue(whole.elapsed, "ns");
  if (rows.perThread) return `${name}: the total is the elapsed time (${e}); each [thread] node holds that thread's wall time; % is of the elapsed time.`;
  return `${name}: rows add up the wall time of every thread they ran in, so they are no share of the elapsed time (${e}); no % is shown.`;
}

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
  return { n, parent, frame, frames, metrics, inc, exc, childStart, childIdx, perThread: true, elapsed: null };
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

/** The metric that sizes flame-graph boxes for `spec`: the numerator for a ratio, the metric a
 * merge statistic is of (a statistic does not add up: a box's max is no part of its parent's). */
export function widthMetric(t: Tree, spec: MetricSpec): string {
  const base = statBase(spec.num);
  return ruleOf(t, spec.num) === "stored" && base !== null ? base : spec.num;
}

/** The additive values that size flame-graph boxes (widthMetric). Wall time's root is the sum
 * of its threads here, drawn side by side, not the elapsed time the root holds. */
export function widthOf(t: Tree, spec: MetricSpec): Float64Array {
  const m = widthMetric(t, spec);
  const inc = t.inc[m];
  if (!inc) return zeros(t);
  if (ruleOf(t, m) !== "per_thread" || t.elapsed === null) return inc;
  return cached(t.inc, `width:${m}`, () => {
    const w = inc.slice();
    w[0] = t.exc[m]?.[0] ?? 0;
    for (const c of children(t, 0)) w[0] += inc[c];
    return w;
  });
}

const intFormat = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });

export function formatValue(v: number, unit: string): string {
  if (Number.isNaN(v)) return "n/a"; // a statistic that does not combine (Combiner)
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
  if (!(total > 0) || Number.isNaN(part)) return "";
  const p = (100 * part) / total;
  return `${p >= 10 || p === 0 ? p.toFixed(1) : p.toFixed(2)}%`;
}
