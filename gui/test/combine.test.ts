// How values combine in the views (model.ts combineRule / Combiner): the statistics of a merged
// profile and wall time across threads, as python/deepcontext/reader.py combine_rule has them.
import { describe, expect, it } from "vitest";
import { LazyBottomUp, bottomUp, flat, hideKinds, lineMetrics, sandwich } from "../src/transforms";
import { Tree, combineNote, combineRule, elapsedNs, findSpec, formatPercent, formatValue, metricSpecs, setWholes, shareTotal, widthMetric, widthOf } from "../src/model";
import { Spec, tree } from "./helpers";

/** `t` with one more metric: exclusive values per node, inclusive ones given (a statistic's are
 * stored, not summed) or else summed from the exclusive. */
function withMetric(t: Tree, name: string, exc: number[], inc?: number[]): Tree {
  const e = Float64Array.from(exc);
  let i = inc ? Float64Array.from(inc) : Float64Array.from(exc);
  if (!inc) {
    i = Float64Array.from(exc);
    for (let n = t.n - 1; n > 0; n--) i[t.parent[n]] += i[n];
  }
  t.metrics.push({ name, unit: "ns", description: "" });
  t.exc[name] = e;
  t.inc[name] = i;
  return t;
}

const nodeOf = (t: Tree, label: string, nth = 0): number => {
  const hits: number[] = [];
  for (let n = 1; n < t.n; n++) if (t.frames.name[t.frame[n]] === label) hits.push(n);
  return hits[nth];
};

/**
 * A merged profile of two runs (cpu_time per input: main 0, a 3 | 5 under the import of mod, a 2 | 2
 * directly, b 1 | 1): cpu_time holds the inputs' sums, cpu_time:mean their means, cpu_time:max and
 * cpu_time:imbalance the statistics across inputs, stored per node (exclusive and inclusive).
 * Node ids: 1 main, 2 imp (import system), 3 a, 4 a, 5 b, 6 idle (measured no cpu_time).
 */
function merged(): Tree {
  const specs: Spec[] = [["main", 0, [["imp", 0, [["a", 8]]], ["a", 4], ["b", 2], ["idle", 0]]]];
  const t = tree(specs);
  t.frames.file[t.frame[nodeOf(t, "imp")]] = "<frozen importlib._bootstrap>";
  //                                 root main imp a  a  b  idle
  withMetric(t, "cpu_time:mean", [0, 0, 0, 4, 2, 1, 0]);
  withMetric(t, "cpu_time:max", [0, 0, 0, 5, 2, 1, 0], [8, 8, 5, 5, 2, 1, 0]);
  withMetric(t, "cpu_time:imbalance", [0, 0, 0, 1.25, 1, 1, 0], [1.14, 1.14, 1.25, 1.25, 1, 1, 0]);
  return t;
}

describe("the combine rule of each metric", () => {
  it("mirrors reader.combine_rule: sums, a merge's statistics, wall time, peak bytes", () => {
    const names = ["cpu_time", "cpu_time:mean", "cpu_time:max", "cpu_time:std", "wall_time", "peak_bytes"];
    expect(names.map((m) => combineRule(m, names))).toEqual(["sum", "sum", "stored", "stored", "per_thread", "max"]);
    // a metric named like a statistic of a metric the profile does not have is an ordinary sum
    expect(combineRule("foo:max", names)).toBe("sum");
  });
});

describe("a merged profile's statistics", () => {
  it("are n/a where spliced import frames merge two measured nodes, kept where a row is one", () => {
    const t = merged();
    const { tree: h } = hideKinds(t, new Set(["import"]));
    const a = nodeOf(h, "a");
    expect(nodeOf(h, "a", 1)).toBeUndefined(); // the two a's are one row now
    expect(h.inc.cpu_time[a]).toBe(12); // sums add up
    expect(h.inc["cpu_time:mean"][a]).toBe(6);
    expect(h.inc["cpu_time:max"][a]).toBeNaN(); // the max of a sum is not the sum of the maxima
    expect(h.exc["cpu_time:imbalance"][a]).toBeNaN();
    // the root and main are the whole profile still: their stored statistics hold
    expect(h.inc["cpu_time:max"][0]).toBe(8);
    expect(h.inc["cpu_time:max"][nodeOf(h, "main")]).toBe(8);
    expect(h.inc["cpu_time:imbalance"][0]).toBe(1.14);
    expect(h.inc["cpu_time:imbalance"][nodeOf(h, "b")]).toBe(1);
    expect(h.exc["cpu_time:max"][nodeOf(h, "b")]).toBe(1);
  });

  it("are n/a in flat, bottom-up and sandwich rows that combine several measured nodes", () => {
    const t = merged();
    const f = flat(t);
    expect(f.exc["cpu_time:max"][nodeOf(f, "a")]).toBeNaN();
    expect(f.inc["cpu_time:max"][nodeOf(f, "b")]).toBe(1);
    expect(f.inc["cpu_time:max"][0]).toBe(8);
    const bu = bottomUp(t);
    expect(bu.inc["cpu_time:max"][nodeOf(bu, "a")]).toBeNaN();
    expect(bu.inc["cpu_time:max"][nodeOf(bu, "b")]).toBe(1);
    expect(bu.inc["cpu_time:max"][0]).toBe(8);
    expect(bu.inc.cpu_time[nodeOf(bu, "a")]).toBe(12);
    const lazy = new LazyBottomUp(t);
    const rows = lazy.children(0);
    const la = rows.find((n) => lazy.frames.name[lazy.frame[n]] === "a")!;
    expect(lazy.inc["cpu_time:max"][la]).toBeNaN();
    expect(lazy.inc["cpu_time:max"][0]).toBe(8);
    const s = sandwich(t, t.frame[nodeOf(t, "a")]);
    expect(s.callers.inc["cpu_time:max"][1]).toBeNaN();
    expect(s.callees.inc["cpu_time:max"][1]).toBeNaN();
    expect(s.callees.inc.cpu_time[1]).toBe(12);
    // a row of one measured node keeps its stored value
    const sm = sandwich(t, t.frame[nodeOf(t, "b")]);
    expect(sm.callers.inc["cpu_time:imbalance"][1]).toBe(1);
  });

  it("are n/a on a source line that holds several measured nodes", () => {
    const t = merged();
    const a = t.frame[nodeOf(t, "a")];
    t.frames.line[a] = t.frames.line[t.frame[nodeOf(t, "b")]]; // a and b on one line
    const spec = findSpec(metricSpecs(t.metrics), "cpu_time:max")!;
    const lines = lineMetrics(t, spec, "/src/app.py", t.inc["cpu_time:max"], t.exc["cpu_time:max"]);
    expect(lines.find((l) => l.line === t.frames.line[a])!.exc).toBeNaN();
  });

  it("have no share, and size no flame graph: their metric does", () => {
    const t = merged();
    const specs = metricSpecs(t.metrics);
    const max = findSpec(specs, "cpu_time:max")!;
    expect(shareTotal(t, max)).toBeNull();
    expect(shareTotal(t, findSpec(specs, "cpu_time:mean")!)).toBe(7);
    expect(shareTotal(t, findSpec(specs, "cpu_time")!)).toBe(14);
    expect(widthMetric(t, max)).toBe("cpu_time");
    expect(widthOf(t, max)).toBe(t.inc.cpu_time);
    expect(combineNote(t, "cpu_time:max")).toMatch(/does not add up.*n\/a/);
    expect(formatValue(NaN, "ns")).toBe("n/a");
    expect(formatPercent(NaN, 14)).toBe("");
  });
});

/** Two threads' wall time, 10 s and 8 s, in a run of 12 s elapsed: f runs in both. */
function twoThreads(meta: Record<string, string> = { elapsed_ns: "12" }): Tree {
  const t = tree([
    ["thread:A", 0, [["f", 6], ["g", 4]]],
    ["thread:B", 0, [["f", 8]]],
  ]);
  withMetric(t, "wall_time", [0, 0, 6, 4, 0, 8]);
  return setWholes(t, meta);
}

describe("wall time across threads", () => {
  it("has the elapsed time as its whole; each thread keeps its own wall time", () => {
    const t = twoThreads();
    const wall = findSpec(metricSpecs(t.metrics), "wall_time")!;
    expect(t.inc.wall_time[0]).toBe(12);
    expect(t.inc.wall_time[nodeOf(t, "A")]).toBe(10);
    expect(t.inc.wall_time[nodeOf(t, "B")]).toBe(8);
    expect(shareTotal(t, wall)).toBe(12);
    // a flame graph draws the threads side by side
    expect(widthOf(t, wall)[0]).toBe(18);
    // cpu_time is untouched
    expect(t.inc.cpu_time[0]).toBe(18);
    expect(combineNote(t, "wall_time")).toMatch(/elapsed time \(12 ns\)/);
  });

  it("keeps the elapsed time at the root of a view with frames hidden", () => {
    const { tree: h } = hideKinds(twoThreads(), new Set(["native"]));
    expect(h.inc.wall_time[0]).toBe(12);
    const { tree: hp } = hideKinds(twoThreads(), new Set(["python"]));
    expect(hp.inc.wall_time[0]).toBe(12);
    expect(hp.perThread).toBe(true);
  });

  it("has no share in rows that add up several threads", () => {
    const t = twoThreads();
    const wall = findSpec(metricSpecs(t.metrics), "wall_time")!;
    const f = flat(t);
    expect(f.inc.wall_time[nodeOf(f, "f")]).toBe(14); // more than the elapsed 12: no share of it
    expect(shareTotal(t, wall, f)).toBeNull();
    expect(shareTotal(t, wall, bottomUp(t))).toBeNull();
    expect(shareTotal(t, wall, new LazyBottomUp(t))).toBeNull();
    expect(shareTotal(t, wall, sandwich(t, t.frame[nodeOf(t, "f")]).callers)).toBeNull();
    const { tree: merged } = hideKinds(t, new Set(["thread"]));
    expect(merged.inc.wall_time[nodeOf(merged, "f")]).toBe(14);
    expect(shareTotal(merged, wall)).toBeNull();
    expect(combineNote(t, "wall_time", f)).toMatch(/no % is shown/);
  });

  it("of a profile without elapsed_ns keeps the threads' sum, and says so", () => {
    const t = twoThreads({});
    expect(t.inc.wall_time[0]).toBe(18);
    expect(t.elapsed).toBeNull();
    expect(combineNote(t, "wall_time")).toMatch(/does not record the elapsed time/);
  });

  it("of a merged profile has the inputs' elapsed times added up as its whole", () => {
    const inputs = [{ meta: { elapsed_ns: "5" } }, { meta: { elapsed_ns: "7" } }];
    expect(elapsedNs({ merged_inputs: JSON.stringify(inputs) })).toBe(12);
    expect(elapsedNs({ merged_inputs: JSON.stringify([...inputs, { meta: {} }]) })).toBeNull();
    expect(elapsedNs({ merged_inputs: "junk" })).toBeNull();
    expect(elapsedNs({ elapsed_ns: "0" })).toBeNull();
  });
});
