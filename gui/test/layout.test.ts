import { describe, expect, it } from "vitest";
import { tree } from "./helpers";
import { hitTest, layoutFlame } from "../src/layout";

const t = tree([["main", 0, [["a", 60], ["b", 30], ["c", 10, [["d", 0.001]]]]]]);

describe("layoutFlame", () => {
  it("places children left to right by descending value", () => {
    const l = layoutFlame(t, t.inc.cpu_time, 0, 1000);
    const boxes = Array.from({ length: l.count }, (_, i) => [t.frames.name[t.frame[l.node[i]]], l.depth[i], +l.x[i].toFixed(4), +l.w[i].toFixed(4)]);
    expect(boxes).toEqual([
      ["", 0, 0, 1],
      ["main", 1, 0, 1],
      ["a", 2, 0, 0.6],
      ["b", 2, 0.6, 0.3],
      ["c", 2, 0.9, 0.1],
    ]);
    expect(l.maxDepth).toBe(2);
  });

  it("drops boxes narrower than the pixel threshold and keeps the rest", () => {
    const l = layoutFlame(t, t.inc.cpu_time, 0, 100_000_000, 0.5);
    expect(l.count).toBe(6); // d is 1e-5 of the total: 1000 px at this width
    const narrow = layoutFlame(t, t.inc.cpu_time, 0, 10, 1.5);
    expect(narrow.count).toBe(4); // a (6 px), b (3 px) kept; c (1 px) and d dropped
  });

  it("focuses a subtree with its ancestors above it", () => {
    const c = t.frames.name.indexOf("c");
    const node = Array.from(t.frame).indexOf(c);
    const l = layoutFlame(t, t.inc.cpu_time, node, 1000, 0.0001);
    expect(l.focusDepth).toBe(2);
    const names = Array.from({ length: l.count }, (_, i) => t.frames.name[t.frame[l.node[i]]]);
    expect(names).toEqual(["", "main", "c", "d"]);
    expect(l.w[3]).toBeCloseTo(0.0001);
  });

  it("hit-tests boxes by row and x", () => {
    const l = layoutFlame(t, t.inc.cpu_time, 0, 1000);
    expect(t.frames.name[t.frame[l.node[hitTest(l, 0.65, 2)]]]).toBe("b");
    expect(hitTest(l, 0.5, 5)).toBe(-1);
  });
});
