// Flame-graph layout: which boxes are wide enough to draw for a given focus and canvas width.

import { Tree, children } from "./model";

export interface Layout {
  node: Int32Array;
  /** left edge and width as fractions of the canvas width */
  x: Float64Array;
  w: Float64Array;
  depth: Int32Array;
  count: number;
  maxDepth: number;
  /** depth of the focused node (its ancestors fill the rows above it) */
  focusDepth: number;
}

const sortedCache = new WeakMap<Tree, Map<Float64Array, Int32Array>>();

/** Children of every node sorted by descending value (cached per tree and value array). */
export function sortedChildren(t: Tree, values: Float64Array): Int32Array {
  let m = sortedCache.get(t);
  if (!m) {
    m = new Map();
    sortedCache.set(t, m);
  }
  let s = m.get(values);
  if (!s) {
    s = t.childIdx.slice();
    for (let i = 0; i < t.n; i++) {
      const a = t.childStart[i];
      const b = t.childStart[i + 1];
      if (b - a > 1) s.subarray(a, b).sort((x, y) => values[y] - values[x] || x - y);
    }
    m.set(values, s);
  }
  return s;
}

/**
 * Lays out the subtree of `focus` across the full width, with its ancestors as full-width rows
 * above. Boxes narrower than `minPx` of `pxWidth` are left out (with everything under them).
 */
export function layoutFlame(t: Tree, values: Float64Array, focus: number, pxWidth: number, minPx = 0.5): Layout {
  const sorted = sortedChildren(t, values);
  const cap = 1024;
  let node = new Int32Array(cap);
  let x = new Float64Array(cap);
  let w = new Float64Array(cap);
  let depth = new Int32Array(cap);
  let count = 0;
  let maxDepth = 0;
  const push = (n: number, xx: number, ww: number, d: number) => {
    if (count === node.length) {
      const grow = <T extends Int32Array | Float64Array>(a: T): T => {
        const b = new (a.constructor as { new (n: number): T })(a.length * 2);
        b.set(a);
        return b;
      };
      node = grow(node);
      x = grow(x);
      w = grow(w);
      depth = grow(depth);
    }
    node[count] = n;
    x[count] = xx;
    w[count] = ww;
    depth[count] = d;
    count++;
    if (d > maxDepth) maxDepth = d;
  };
  const anc: number[] = [];
  for (let j = focus; j > 0; j = t.parent[j]) anc.push(t.parent[j]);
  anc.reverse();
  anc.forEach((a, d) => push(a, 0, 1, d));
  const focusDepth = anc.length;
  const total = values[focus];
  push(focus, 0, 1, focusDepth);
  if (total > 0) {
    const minW = minPx / Math.max(1, pxWidth);
    // explicit stack of (node, x, depth)
    const sn: number[] = [focus];
    const sx: number[] = [0];
    const sd: number[] = [focusDepth];
    while (sn.length) {
      const n = sn.pop()!;
      let cx = sx.pop()!;
      const d = sd.pop()! + 1;
      const a = t.childStart[n];
      const b = t.childStart[n + 1];
      for (let k = a; k < b; k++) {
        const c = sorted[k];
        const cw = values[c] / total;
        if (!(cw >= minW)) break; // sorted: the rest are narrower
        push(c, cx, cw, d);
        if (t.childStart[c + 1] > t.childStart[c]) {
          sn.push(c);
          sx.push(cx);
          sd.push(d);
        }
        cx += cw;
      }
    }
  }
  return { node, x, w, depth, count, maxDepth, focusDepth };
}

/** Index of the box at (fraction fx, row d), or -1. */
export function hitTest(l: Layout, fx: number, d: number): number {
  for (let i = 0; i < l.count; i++) {
    if (l.depth[i] === d && fx >= l.x[i] && fx < l.x[i] + l.w[i]) return i;
  }
  return -1;
}

export { children };
