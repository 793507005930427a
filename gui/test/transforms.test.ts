import { describe, expect, it } from "vitest";
import { tree, shape } from "./helpers";
import { LazyBottomUp, bottomUp, diff, fileTotals, flat, hideKinds, hotPath, lineMetrics, sandwich, search, topLevelMask } from "../src/transforms";
import { excOf, findSpec, incOf, isImportSystem, metricSpecs } from "../src/model";

const sample = () =>
  tree([
    [
      "main",
      1,
      [
        ["train", 2, [["native:matmul", 10], ["operator:aten::add", 3, [["native:add_kernel", 4]]]]],
        ["eval", 0, [["native:matmul", 5]]],
      ],
    ],
  ]);

describe("tree basics", () => {
  it("computes inclusive values that sum the subtree", () => {
    const t = sample();
    expect(t.inc.cpu_time[0]).toBe(25);
    expect(shape(t)).toEqual([
      "root:",
      25,
      0,
      [["main", 25, 1, [["eval", 5, 0, [["native:matmul", 5, 5]]], ["train", 19, 2, [["native:matmul", 10, 10], ["operator:aten::add", 7, 3, [["native:add_kernel", 4, 4]]]]]]]],
    ]);
  });
});

describe("hideKinds", () => {
  it("gives hidden frames' values to the nearest shown ancestor", () => {
    const { tree: h, map } = hideKinds(sample(), new Set(["native"]));
    expect(shape(h)).toEqual([
      "root:",
      25,
      0,
      [["main", 25, 1, [["eval", 5, 5], ["train", 19, 12, [["operator:aten::add", 7, 7]]]]]],
    ]);
    // node 3 (matmul under train) maps to train
    expect(h.frames.name[h.frame[map[3]]]).toBe("train");
  });

  it("merges siblings that meet after hiding their parents", () => {
    const t = tree([["a", 0, [["native:x", 0, [["b", 2]]], ["native:y", 0, [["b", 3]]]]]]);
    const { tree: h } = hideKinds(t, new Set(["native"]));
    expect(shape(h)).toEqual(["root:", 5, 0, [["a", 5, 0, [["b", 5, 5]]]]]);
  });

  it("hides Python's import system under its own name, not every Python frame", () => {
    const t = tree([["main", 1, [["imp", 0, [["mod", 4]]]]]]);
    const imp = t.frames.name.indexOf("imp");
    t.frames.file[imp] = "<frozen importlib._bootstrap>";
    expect(isImportSystem(t.frames, imp)).toBe(true);
    expect(isImportSystem(t.frames, t.frames.name.indexOf("mod"))).toBe(false);
    const { tree: h } = hideKinds(t, new Set(["import"]));
    expect(shape(h)).toEqual(["root:", 5, 0, [["main", 5, 1, [["mod", 4, 4]]]]]);
  });

  it("is the identity when nothing is hidden", () => {
    const t = sample();
    expect(hideKinds(t, new Set()).tree).toBe(t);
  });
});

describe("bottomUp", () => {
  it("inverts the tree: self time first, callers below", () => {
    const b = bottomUp(sample());
    expect(shape(b)).toEqual([
      "root:",
      25,
      0,
      [
        ["main", 1, 1],
        ["native:add_kernel", 4, 4, [["operator:aten::add", 4, 0, [["train", 4, 0, [["main", 4, 0]]]]]]],
        ["native:matmul", 15, 15, [["eval", 5, 0, [["main", 5, 0]]], ["train", 10, 0, [["main", 10, 0]]]]],
        ["operator:aten::add", 3, 3, [["train", 3, 0, [["main", 3, 0]]]]],
        ["train", 2, 2, [["main", 2, 0]]],
      ],
    ]);
  });

  it("keeps every recursive level as its own caller node", () => {
    const t = tree([["f", 1, [["f", 2]]]]);
    const b = bottomUp(t);
    expect(shape(b)).toEqual(["root:", 3, 0, [["f", 3, 3, [["f", 2, 0]]]]]);
  });
});

describe("flat", () => {
  it("sums exclusive per frame and counts recursion once in inclusive", () => {
    const t = tree([["f", 1, [["g", 2, [["f", 4]]]]]]);
    const fl = flat(t);
    expect(shape(fl)).toEqual(["root:", 7, 0, [["f", 7, 5], ["g", 6, 2]]]);
  });
});

describe("sandwich", () => {
  it("shows callers and merged callees of a frame", () => {
    const t = sample();
    const matmul = t.frames.name.indexOf("matmul");
    const s = sandwich(t, matmul);
    expect(shape(s.callees)).toEqual(["root:", 15, 0, [["native:matmul", 15, 15]]]);
    expect(shape(s.callers)).toEqual([
      "root:",
      15,
      0,
      [["native:matmul", 15, 15, [["eval", 5, 0, [["main", 5, 0]]], ["train", 10, 0, [["main", 10, 0]]]]]],
    ]);
    const train = t.frames.name.indexOf("train");
    const s2 = sandwich(t, train);
    expect(shape(s2.callees)).toEqual([
      "root:",
      19,
      0,
      [["train", 19, 2, [["native:matmul", 10, 10], ["operator:aten::add", 7, 3, [["native:add_kernel", 4, 4]]]]]],
    ]);
  });

  it("counts a recursive frame once", () => {
    const t = tree([["f", 1, [["f", 2]]]]);
    const s = sandwich(t, 1);
    expect(s.callees.inc.cpu_time[0]).toBe(3);
    expect(s.callers.inc.cpu_time[0]).toBe(3);
  });
});

describe("diff", () => {
  it("matches call paths and keeps both profiles' values", () => {
    const a = tree([["main", 1, [["train", 8], ["new", 2]]]]);
    const b = tree([["main", 1, [["train", 4], ["old", 3]]]]);
    const d = diff(a, b);
    expect(shape(d)).toEqual(["root:", 11, 0, [["main", 11, 1, [["new", 2, 2], ["old", 0, 0], ["train", 8, 8]]]]]);
    expect(shape(d, "cpu_time", true)).toEqual(["root:", 8, 0, [["main", 8, 1, [["new", 0, 0], ["old", 3, 3], ["train", 4, 4]]]]]);
  });
});

describe("search", () => {
  it("marks matching nodes and totals the outermost matches", () => {
    const t = sample();
    const r = search(t, /matmul|train/i, t.inc.cpu_time);
    expect(r.count).toBe(3);
    expect(r.total).toBe(19 + 5);
  });
});

describe("metrics", () => {
  it("offers derived ratio metrics", () => {
    const t = sample();
    const specs = metricSpecs(t.metrics);
    const per = findSpec(specs, "cpu_time/samples")!;
    expect(per.label).toBe("cpu_time per sample");
    expect(incOf(t, per)[0]).toBeCloseTo(10);
    expect(excOf(t, per)[1]).toBeCloseTo(10);
  });
});

describe("source lines", () => {
  it("sums exclusive per line and counts recursive lines once", () => {
    const t = tree([["f", 1, [["g", 2, [["f", 4]]]]]]);
    // helper puts frame i at line i of /src/app.py: f -> line 1, g -> line 2
    const spec = metricSpecs(t.metrics)[0];
    const lines = lineMetrics(t, spec, "/src/app.py", incOf(t, spec), excOf(t, spec));
    expect(lines).toEqual([
      { line: 1, inc: 7, exc: 5 },
      { line: 2, inc: 6, exc: 2 },
    ]);
    expect(fileTotals(t, t.inc.cpu_time)).toEqual([{ file: "/src/app.py", inc: 7 }]);
  });

  it("finds outermost occurrences", () => {
    const t = tree([["f", 1, [["g", 2, [["f", 4]]]]]]);
    expect(Array.from(topLevelMask(t, t.frame, t.frames.kind.length))).toEqual([1, 1, 1, 0]); // the root has frame 0 too
  });
});

describe("hotPath", () => {
  it("follows the heaviest child", () => {
    const t = sample();
    expect(hotPath(t, t.inc.cpu_time).map((i) => t.frames.name[t.frame[i]])).toEqual(["main", "train", "matmul"]);
  });
});

describe("LazyBottomUp", () => {
  const lazyShape = (b: LazyBottomUp, n = 0): unknown => {
    const label = b.frames.kind[b.frame[n]] === "python" ? b.frames.name[b.frame[n]] : `${b.frames.kind[b.frame[n]]}:${b.frames.name[b.frame[n]]}`;
    const out: unknown[] = [label, b.inc.cpu_time[n], b.exc.cpu_time[n]];
    const ks = b.children(n).map((c) => lazyShape(b, c)).sort((x, y) => String((x as unknown[])[0]).localeCompare(String((y as unknown[])[0])));
    if (ks.length) out.push(ks);
    return out;
  };

  it("expands to the same tree as the eager inversion", () => {
    for (const t of [sample(), tree([["f", 1, [["f", 2]]]]), tree([["a", 1, [["b", 2, [["c", 3]]], ["c", 4, [["b", 5]]]]], ["b", 6]])]) {
      const lazy = new LazyBottomUp(t);
      expect(lazyShape(lazy)).toEqual(shape(bottomUp(t)));
    }
  });

  it("computes callers only when a node is expanded", () => {
    const lazy = new LazyBottomUp(sample());
    const before = lazy.n;
    expect(before).toBe(1 + 5); // root + one row per frame with exclusive time
    const matmul = lazy.children(0).find((c) => lazy.frames.name[lazy.frame[c]] === "matmul")!;
    expect(lazy.hasChildren(matmul)).toBe(true);
    expect(lazy.n).toBe(before);
    expect(lazy.children(matmul).length).toBe(2);
    expect(lazy.n).toBe(before + 2);
  });
});
