// Tree transforms behind the views: hide frames by kind, bottom-up inversion, flat profile,
// sandwich (callers and callees of one frame), diff of two profiles, search and per-line metrics.
// Each returns a new Tree (model.ts) so the same table and flame-graph code draws every view.

import { Combiner, Frames, IMPORT_SYSTEM, MetricInfo, MetricSpec, Tree, addsUp, children, frameKey, frameLabel, isImportSystem, makeTree, ruleOf } from "./model";

/** Grows a tree node by node, merging children of one parent that share a frame. */
class Builder {
  parent: number[] = [-1];
  frame: number[] = [0];
  private keys = new Map<number, number>();
  inc: Record<string, number[]> = {};
  exc: Record<string, number[]> = {};
  /** whether the root is the whole profile (keepRoot) */
  private whole = false;

  constructor(
    private nframes: number,
    private metricNames: string[],
    /** the tree whose metrics these are (for each metric's combine rule) */
    private from: { metrics: MetricInfo[] },
  ) {
    for (const m of metricNames) {
      this.inc[m] = [0];
      this.exc[m] = [0];
    }
  }

  get size(): number {
    return this.parent.length;
  }

  child(p: number, f: number): number {
    const k = p * this.nframes + f;
    let id = this.keys.get(k);
    if (id === undefined) {
      id = this.parent.length;
      this.keys.set(k, id);
      this.parent.push(p);
      this.frame.push(f);
      for (const m of this.metricNames) {
        this.inc[m].push(0);
        this.exc[m].push(0);
      }
    }
    return id;
  }

  /** Sets inclusive = exclusive + children's inclusive for the metrics that add up (the others'
   * inclusive values are combined from the nodes' own). */
  sumUp(): void {
    for (const m of this.metricNames) {
      if (!addsUp(ruleOf(this.from, m))) continue;
      const inc = this.inc[m];
      const exc = this.exc[m];
      for (let i = 0; i < inc.length; i++) inc[i] = exc[i];
      for (let i = inc.length - 1; i > 0; i--) inc[this.parent[i]] += inc[i];
    }
  }

  /** The tree built, from `t`: its rows lie in one thread each only if `perThread`. */
  finish(t: Tree, perThread: boolean, frames: Frames = t.frames, metrics: MetricInfo[] = t.metrics): Tree {
    const inc: Record<string, Float64Array> = {};
    const exc: Record<string, Float64Array> = {};
    for (const m of this.metricNames) {
      inc[m] = Float64Array.from(this.inc[m]);
      exc[m] = Float64Array.from(this.exc[m]);
    }
    const out = makeTree(Int32Array.from(this.parent), Int32Array.from(this.frame), frames, metrics, inc, exc);
    out.perThread = perThread && t.perThread;
    out.elapsed = this.whole ? t.elapsed : null;
    return out;
  }

  /** The root is the whole profile still: its values are `t`'s root values, by every rule. */
  keepRoot(t: Tree): void {
    for (const m of this.metricNames) this.inc[m][0] = t.inc[m][0];
    this.whole = true;
  }
}

function names(t: Tree): string[] {
  return t.metrics.map((m) => m.name).filter((m) => t.inc[m]);
}

/**
 * Nodes of `t` that have no ancestor with the same key (key[i] < 0: no key). Used to count a
 * recursive frame (or source line) once in inclusive totals.
 */
export function topLevelMask(t: Tree, key: Int32Array, nkeys: number): Uint8Array {
  const mask = new Uint8Array(t.n);
  const onStack = new Int32Array(nkeys);
  const stack: number[] = [0];
  while (stack.length) {
    const x = stack.pop()!;
    if (x < 0) {
      const k = key[~x];
      if (k >= 0) onStack[k]--;
      continue;
    }
    const k = key[x];
    if (k >= 0) {
      if (onStack[k] === 0) mask[x] = 1;
      onStack[k]++;
    }
    stack.push(~x);
    const s = t.childStart[x];
    const e = t.childStart[x + 1];
    for (let c = e - 1; c >= s; c--) stack.push(t.childIdx[c]);
  }
  return mask;
}

export interface Filtered {
  tree: Tree;
  /** original node id -> node id in the filtered tree (a hidden node maps to its nearest shown ancestor) */
  map: Int32Array;
}

/** Removes frames of the hidden kinds, giving their values to the nearest shown ancestor and
 * merging the children that then share a parent and a frame. */
export function hideKinds(t: Tree, hidden: Set<string>): Filtered {
  const hide = new Uint8Array(t.frames.kind.length);
  const imports = hidden.has(IMPORT_SYSTEM);
  let any = false;
  t.frames.kind.forEach((k, i) => {
    if ((hidden.has(k) && k !== "root") || (imports && isImportSystem(t.frames, i))) {
      hide[i] = 1;
      any = true;
    }
  });
  if (!any) {
    const map = new Int32Array(t.n);
    for (let i = 0; i < t.n; i++) map[i] = i;
    return { tree: t, map };
  }
  const ms = names(t);
  const b = new Builder(t.frames.kind.length, ms, t);
  const map = new Int32Array(t.n);
  for (let i = 1; i < t.n; i++) {
    const p = map[t.parent[i]];
    map[i] = hide[t.frame[i]] ? p : b.child(p, t.frame[i]);
  }
  for (const m of ms) {
    const ce = new Combiner(t, m, "exc");
    const ci = new Combiner(t, m, "inc");
    const exc = t.exc[m];
    const inc = t.inc[m];
    const be = b.exc[m];
    const bi = b.inc[m];
    for (let i = 0; i < t.n; i++) {
      ce.add(be, map[i], i, exc[i]);
      // a shown node keeps its whole subtree: its inclusive value, combined with its merged twins'
      if (!addsUp(ci.rule) && (i === 0 || !hide[t.frame[i]])) ci.add(bi, map[i], i, inc[i]);
    }
  }
  b.sumUp();
  b.keepRoot(t);
  // with threads hidden, their nodes merge: rows add up several threads
  return { tree: b.finish(t, !hidden.has("thread")), map };
}

/** The inverted tree: the first level holds every frame with exclusive value, its children are
 * its callers, and so on up to the root's children. */
export function bottomUp(t: Tree): Tree {
  const ms = names(t);
  const b = new Builder(t.frames.kind.length, ms, t);
  const excs = ms.map((m) => t.exc[m]);
  // every row combines the exclusive values of the nodes measured below it on that caller chain
  const cinc = ms.map((m) => new Combiner(t, m, "exc"));
  const cexc = ms.map((m) => new Combiner(t, m, "exc"));
  const binc = ms.map((m) => b.inc[m]);
  const bexc = ms.map((m) => b.exc[m]);
  const nm = ms.length;
  for (let i = 1; i < t.n; i++) {
    let nonzero = false;
    for (let k = 0; k < nm; k++) if (excs[k][i] !== 0) nonzero = true;
    if (!nonzero) continue;
    let cur = 0;
    for (let j = i; j !== 0; j = t.parent[j]) {
      cur = b.child(cur, t.frame[j]);
      for (let k = 0; k < nm; k++) {
        const v = excs[k][i];
        cinc[k].add(binc[k], cur, i, v);
        if (j === i) cexc[k].add(bexc[k], cur, i, v);
      }
    }
  }
  b.keepRoot(t);
  return b.finish(t, false);
}

/** One row per frame under the root: exclusive summed over its nodes, inclusive summed over
 * the nodes with no ancestor of the same frame. */
export function flat(t: Tree): Tree {
  const ms = names(t);
  const nf = t.frames.kind.length;
  const top = topLevelMask(t, t.frame, nf);
  const b = new Builder(nf, ms, t);
  const row = new Int32Array(t.n);
  for (let i = 1; i < t.n; i++) row[i] = b.child(0, t.frame[i]);
  for (const m of ms) {
    const ce = new Combiner(t, m, "exc");
    const ci = new Combiner(t, m, "inc");
    const exc = t.exc[m];
    const inc = t.inc[m];
    const be = b.exc[m];
    const bi = b.inc[m];
    for (let i = 1; i < t.n; i++) {
      ce.add(be, row[i], i, exc[i]);
      if (top[i]) ci.add(bi, row[i], i, inc[i]);
    }
  }
  b.keepRoot(t);
  return b.finish(t, false);
}

export interface Sandwich {
  callers: Tree;
  callees: Tree;
}

/** Callers (inverted, from the frame up to the root) and callees (the merged subtrees) of every
 * node with frame `f`. Recursive occurrences are counted once, at the outermost. */
export function sandwich(t: Tree, f: number): Sandwich {
  const ms = names(t);
  const nf = t.frames.kind.length;
  // callees
  const cb = new Builder(nf, ms, t);
  const fnode = cb.child(0, f);
  const map = new Int32Array(t.n).fill(-1);
  const top: number[] = [];
  for (let i = 1; i < t.n; i++) {
    const p = map[t.parent[i]];
    if (p >= 0) map[i] = cb.child(p, t.frame[i]);
    else if (t.frame[i] === f) {
      map[i] = fnode;
      top.push(i);
    }
  }
  for (const m of ms) {
    const ce = new Combiner(t, m, "exc");
    const ci = new Combiner(t, m, "inc");
    const exc = t.exc[m];
    const inc = t.inc[m];
    for (let i = 1; i < t.n; i++) if (map[i] >= 0) ce.add(cb.exc[m], map[i], i, exc[i]);
    if (!addsUp(ci.rule)) {
      for (let i = 1; i < t.n; i++) if (map[i] >= 0) ci.add(cb.inc[m], map[i], i, inc[i]);
      cb.inc[m][0] = cb.inc[m][fnode]; // the root holds the frame's subtrees only
    }
  }
  cb.sumUp();
  // callers
  const rb = new Builder(nf, ms, t);
  const rf = rb.child(0, f);
  const rinc = new Map(ms.map((m) => [m, new Combiner(t, m, "inc")]));
  for (const m of ms) {
    const ce = new Combiner(t, m, "exc");
    const exc = t.exc[m];
    for (let i = 1; i < t.n; i++) if (t.frame[i] === f) ce.add(rb.exc[m], rf, i, exc[i]);
  }
  for (const i of top) {
    let cur = rf;
    const path: number[] = [rf];
    for (let j = t.parent[i]; j !== 0; j = t.parent[j]) {
      cur = rb.child(cur, t.frame[j]);
      path.push(cur);
    }
    for (const m of ms) {
      const c = rinc.get(m)!;
      const v = t.inc[m][i];
      c.add(rb.inc[m], 0, i, v);
      for (const p of path) c.add(rb.inc[m], p, i, v);
    }
  }
  // the rows add up the frame's occurrences, in whatever threads they ran
  return { callers: rb.finish(t, false), callees: cb.finish(t, false) };
}

/** Merges `cur` and `base` by call path (frames matched by kind, name, file, line and module).
 * The result carries `cur`'s values as inc/exc and the baseline's as `base`. */
export function diff(cur: Tree, base: Tree): Tree {
  const keys = new Map<string, number>();
  const frames: Frames = { kind: [], name: [], file: [], line: [], module: [] };
  const remap = (t: Tree): Int32Array => {
    const out = new Int32Array(t.frames.kind.length);
    for (let i = 0; i < out.length; i++) {
      const k = frameKey(t.frames, i);
      let m = keys.get(k);
      if (m === undefined) {
        m = frames.kind.length;
        keys.set(k, m);
        frames.kind.push(t.frames.kind[i]);
        frames.name.push(t.frames.name[i]);
        frames.file.push(t.frames.file[i]);
        frames.line.push(t.frames.line[i]);
        frames.module.push(t.frames.module[i]);
      }
      out[i] = m;
    }
    return out;
  };
  const fa = remap(cur);
  const fb = remap(base);
  // root frames of both map to the same merged frame only if both are index 0 with kind root
  const metrics: MetricInfo[] = [...cur.metrics];
  for (const m of base.metrics) if (!metrics.some((x) => x.name === m.name)) metrics.push(m);
  const all = metrics.map((m) => m.name);
  const b = new Builder(frames.kind.length + 1, all, { metrics });
  const place = (t: Tree, fm: Int32Array): Int32Array => {
    const map = new Int32Array(t.n);
    for (let i = 1; i < t.n; i++) map[i] = b.child(map[t.parent[i]], fm[t.frame[i]]);
    return map;
  };
  const ma = place(cur, fa);
  const mb = place(base, fb);
  const n = b.size;
  const fill = (t: Tree, map: Int32Array) => {
    const inc: Record<string, Float64Array> = {};
    const exc: Record<string, Float64Array> = {};
    for (const m of all) {
      const ii = new Float64Array(n);
      const ee = new Float64Array(n);
      const ti = t.inc[m];
      const te = t.exc[m];
      if (ti && te) {
        const ci = new Combiner(t, m, "inc");
        const ce = new Combiner(t, m, "exc");
        for (let i = 0; i < t.n; i++) {
          ci.add(ii, map[i], i, ti[i]);
          ce.add(ee, map[i], i, te[i]);
        }
      }
      inc[m] = ii;
      exc[m] = ee;
    }
    return { inc, exc };
  };
  const va = fill(cur, ma);
  const vb = fill(base, mb);
  frames.kind[0] = "root";
  const tree = makeTree(Int32Array.from(b.parent), Int32Array.from(b.frame), frames, metrics, va.inc, va.exc);
  tree.base = vb;
  tree.diffMaps = { cur: ma, base: mb };
  tree.perThread = cur.perThread && base.perThread;
  tree.elapsed = cur.elapsed;
  return tree;
}

export interface SearchResult {
  /** 1 for nodes whose frame label matches */
  match: Uint8Array;
  count: number;
  /** inclusive value of the matched nodes with no matched ancestor */
  total: number;
}

export function compileSearch(q: string): RegExp | null {
  if (!q) return null;
  try {
    return new RegExp(q, "i");
  } catch {
    return null;
  }
}

export function search(t: Tree, re: RegExp, values: Float64Array): SearchResult {
  const nf = t.frames.kind.length;
  const fm = new Uint8Array(nf);
  for (let f = 1; f < nf; f++) {
    if (re.test(frameLabel(t.frames, f)) || re.test(t.frames.file[f])) fm[f] = 1;
  }
  const match = new Uint8Array(t.n);
  const under = new Uint8Array(t.n);
  let count = 0;
  let total = 0;
  for (let i = 1; i < t.n; i++) {
    const m = fm[t.frame[i]];
    if (m) {
      match[i] = 1;
      count++;
      if (!under[t.parent[i]]) total += values[i];
    }
    under[i] = m | under[t.parent[i]];
  }
  return { match, count, total };
}

export interface LineValues {
  line: number;
  inc: number;
  exc: number;
}

/** Per source line of `file`: inclusive (outermost occurrence on each path) and exclusive values. */
export function lineMetrics(t: Tree, spec: MetricSpec, file: string, inc: Float64Array, exc: Float64Array): LineValues[] {
  const f = t.frames;
  let maxLine = 0;
  const lineOfFrame = new Int32Array(f.kind.length).fill(-1);
  for (let i = 0; i < f.kind.length; i++) {
    if (f.file[i] === file && f.line[i] > 0) {
      lineOfFrame[i] = f.line[i];
      if (f.line[i] > maxLine) maxLine = f.line[i];
    }
  }
  const key = new Int32Array(t.n);
  let anyNode = false;
  for (let i = 0; i < t.n; i++) {
    key[i] = lineOfFrame[t.frame[i]];
    if (key[i] >= 0) anyNode = true;
  }
  if (!anyNode) return [];
  const top = topLevelMask(t, key, maxLine + 1);
  const li = new Float64Array(maxLine + 1);
  const le = new Float64Array(maxLine + 1);
  const seen = new Uint8Array(maxLine + 1);
  // a line's row combines its nodes by the metric's rule (a ratio: the ratios added up)
  const ce = spec.den ? null : new Combiner(t, spec.num, "exc");
  const ci = spec.den ? null : new Combiner(t, spec.num, "inc");
  for (let i = 0; i < t.n; i++) {
    const l = key[i];
    if (l < 0) continue;
    seen[l] = 1;
    if (ce) ce.add(le, l, i, exc[i]);
    else le[l] += exc[i];
    if (!top[i]) continue;
    if (ci) ci.add(li, l, i, inc[i]);
    else li[l] += inc[i];
  }
  const out: LineValues[] = [];
  for (let l = 1; l <= maxLine; l++) if (seen[l]) out.push({ line: l, inc: li[l], exc: le[l] });
  return out;
}

export interface FileTotal {
  file: string;
  inc: number;
}

/** Inclusive value per source file (outermost occurrence on each path), largest first. */
export function fileTotals(t: Tree, inc: Float64Array): FileTotal[] {
  const f = t.frames;
  const fileIds = new Map<string, number>();
  const fileOfFrame = new Int32Array(f.kind.length).fill(-1);
  for (let i = 0; i < f.kind.length; i++) {
    if (!f.file[i]) continue;
    let id = fileIds.get(f.file[i]);
    if (id === undefined) {
      id = fileIds.size;
      fileIds.set(f.file[i], id);
    }
    fileOfFrame[i] = id;
  }
  const key = new Int32Array(t.n);
  for (let i = 0; i < t.n; i++) key[i] = fileOfFrame[t.frame[i]];
  const top = topLevelMask(t, key, fileIds.size);
  const tot = new Float64Array(fileIds.size);
  for (let i = 0; i < t.n; i++) if (top[i]) tot[key[i]] += inc[i];
  const out = [...fileIds.entries()].map(([file, id]) => ({ file, inc: tot[id] }));
  out.sort((a, b) => b.inc - a.inc || a.file.localeCompare(b.file));
  return out;
}

/** The heaviest child path from `from` while each step holds at least `minShare` of the total. */
export function hotPath(t: Tree, values: Float64Array, from = 0, minShare = 0.01, maxLen = 64): number[] {
  const total = values[0];
  const out: number[] = [];
  let n = from;
  while (out.length < maxLen) {
    let best = -1;
    let bv = -Infinity;
    for (const c of children(t, n)) {
      if (values[c] > bv) {
        bv = values[c];
        best = c;
      }
    }
    if (best < 0 || !(bv > 0) || bv < minShare * total) break;
    out.push(best);
    n = best;
  }
  return out;
}

/** Node ids from the root's child down to `i`. */
export function pathTo(t: Tree, i: number): number[] {
  const out: number[] = [];
  for (let j = i; j > 0; j = t.parent[j]) out.push(j);
  return out.reverse();
}

/** The deepest node reached from the root by following `frames` (frame keys), or -1. */
export function findByFramePath(t: Tree, keys: string[]): number {
  let n = 0;
  for (const k of keys) {
    let next = -1;
    for (const c of children(t, n)) if (frameKey(t.frames, t.frame[c]) === k) next = c;
    if (next < 0) return -1;
    n = next;
  }
  return n;
}

/**
 * The bottom-up (inverted) tree built lazily: a node's callers are computed when it is first
 * expanded, so opening the view costs one pass over the nodes with exclusive values, not one
 * pass per ancestor of each (the eager `bottomUp` above, kept as the reference in the tests).
 * Each inverted node keeps (cursor, origin) pairs: origin is a node of `t` with exclusive value,
 * cursor its ancestor at this depth of the inverted path.
 */
export class LazyBottomUp {
  readonly frames: Frames;
  readonly metrics: MetricInfo[];
  readonly parent: number[] = [-1];
  readonly frame: number[] = [0];
  readonly inc: Record<string, number[]> = {};
  readonly exc: Record<string, number[]> = {};
  /** a frame's row adds up its time in every thread */
  readonly perThread = false;
  readonly elapsed: number | null;
  private kids: (number[] | null)[] = [null];
  private cursors: (Int32Array | null)[] = [null];
  private origins: (Int32Array | null)[] = [null];
  private names: string[];

  constructor(private t: Tree) {
    this.frames = t.frames;
    this.metrics = t.metrics;
    this.elapsed = t.elapsed;
    this.names = names(t);
    for (const m of this.names) {
      this.inc[m] = [0];
      this.exc[m] = [0];
    }
    const excs = this.names.map((m) => t.exc[m]);
    const start: number[] = [];
    for (let i = 1; i < t.n; i++) {
      for (const e of excs)
        if (e[i] !== 0) {
          start.push(i);
          break;
        }
    }
    const s = Int32Array.from(start);
    this.cursors[0] = s;
    this.origins[0] = s;
    this.expand(0, true);
    for (const m of this.names) this.inc[m][0] = t.inc[m][0]; // the root is the whole profile
  }

  get n(): number {
    return this.parent.length;
  }

  private expand(node: number, first = false): number[] {
    const t = this.t;
    const cur = this.cursors[node]!;
    const org = this.origins[node]!;
    const groups = new Map<number, number[]>();
    for (let k = 0; k < cur.length; k++) {
      const c = first ? cur[k] : t.parent[cur[k]];
      if (c <= 0) continue;
      const f = t.frame[c];
      let g = groups.get(f);
      if (!g) groups.set(f, (g = []));
      g.push(c, org[k]);
    }
    const kids: number[] = [];
    // each new row combines the exclusive values of its origins, by each metric's rule
    const comb = this.names.map((m) => new Combiner(t, m, "exc"));
    const acc = this.names.map(() => new Float64Array(groups.size));
    let row = 0;
    for (const [f, g] of groups) {
      const id = this.parent.length;
      this.parent.push(node);
      this.frame.push(f);
      this.kids.push(null);
      const c = new Int32Array(g.length / 2);
      const o = new Int32Array(g.length / 2);
      for (let k = 0; k < c.length; k++) {
        c[k] = g[2 * k];
        o[k] = g[2 * k + 1];
      }
      this.cursors.push(c);
      this.origins.push(o);
      this.names.forEach((m, k) => {
        const ex = t.exc[m];
        for (const x of o) comb[k].add(acc[k], row, x, ex[x]);
        const v = acc[k][row];
        this.inc[m].push(v);
        this.exc[m].push(first ? v : 0);
      });
      row++;
      kids.push(id);
    }
    this.kids[node] = kids;
    if (!first) {
      this.cursors[node] = null;
      this.origins[node] = null;
    }
    return kids;
  }

  children(node: number): number[] {
    return this.kids[node] ?? this.expand(node);
  }

  hasChildren(node: number): boolean {
    const k = this.kids[node];
    if (k) return k.length > 0;
    const cur = this.cursors[node]!;
    for (let i = 0; i < cur.length; i++) if (this.t.parent[cur[i]] > 0) return true;
    return false;
  }
}
