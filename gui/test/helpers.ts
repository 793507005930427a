import { Frames, Tree, makeTree } from "../src/model";

/** A node spec: [label, exclusive cpu_time, children]; label "kind:name" or just a python name. */
export type Spec = [string, number, Spec[]?];

/** Builds a Tree from nested specs (one metric "cpu_time", plus "samples" = 1 per unit). */
export function tree(roots: Spec[]): Tree {
  const frames: Frames = { kind: ["root"], name: [""], file: [""], line: [0], module: [""] };
  const fids = new Map<string, number>();
  const parent: number[] = [-1];
  const frame: number[] = [0];
  const exc: number[] = [0];
  const frameOf = (label: string): number => {
    let f = fids.get(label);
    if (f === undefined) {
      const [kind, name] = label.includes(":") && !label.startsWith("aten::") ? label.split(/:(.*)/s) : ["python", label];
      f = frames.kind.length;
      fids.set(label, f);
      frames.kind.push(kind);
      frames.name.push(name);
      frames.file.push(kind === "python" ? "/src/app.py" : "");
      frames.line.push(kind === "python" ? f : 0);
      frames.module.push("");
    }
    return f;
  };
  const visit = (s: Spec, p: number) => {
    const id = parent.length;
    parent.push(p);
    frame.push(frameOf(s[0]));
    exc.push(s[1]);
    for (const c of s[2] ?? []) visit(c, id);
  };
  for (const r of roots) visit(r, 0);
  const n = parent.length;
  const e = Float64Array.from(exc);
  const inc = Float64Array.from(exc);
  for (let i = n - 1; i > 0; i--) inc[parent[i]] += inc[i];
  return makeTree(
    Int32Array.from(parent),
    Int32Array.from(frame),
    frames,
    [
      { name: "cpu_time", unit: "ns", description: "" },
      { name: "samples", unit: "count", description: "" },
    ],
    { cpu_time: inc, samples: inc.map((v) => v / 10) },
    { cpu_time: e, samples: e.map((v) => v / 10) },
  );
}

/** The tree as nested [label, inclusive, exclusive] rows sorted by label, for comparisons. */
export function shape(t: Tree, metric = "cpu_time", base = false): unknown {
  const vals = base ? t.base! : t;
  const rec = (i: number): unknown => {
    const kids: number[] = [];
    for (let c = t.childStart[i]; c < t.childStart[i + 1]; c++) kids.push(t.childIdx[c]);
    const label = t.frames.kind[t.frame[i]] === "python" ? t.frames.name[t.frame[i]] : `${t.frames.kind[t.frame[i]]}:${t.frames.name[t.frame[i]]}`;
    const out: unknown[] = [label, vals.inc[metric][i], vals.exc[metric][i]];
    const ks = kids.map(rec).sort((a, b) => String((a as unknown[])[0]).localeCompare(String((b as unknown[])[0])));
    if (ks.length) out.push(ks);
    return out;
  };
  return rec(0);
}
