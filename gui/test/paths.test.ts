import { describe, expect, it } from "vitest";
import { displayPath, fullPath, normalizePath, pathContext } from "../src/paths";
import { frameLabel } from "../src/model";

// the metadata `deepcontext run` writes for `cd /home/u/proj && deepcontext run scripts/train.py`
const meta = { cwd: "/home/u/proj", command: JSON.stringify(["scripts/train.py", "--epochs", "1"]) };
const ctx = pathContext(meta);

describe("short file paths", () => {
  it("finds the program's folder from argv[0] and the working directory", () => {
    expect(ctx).toEqual({ cwd: "/home/u/proj", roots: ["/home/u/proj/scripts", "/home/u/proj"] });
    const roots = (m: Record<string, string>) => pathContext(m).roots;
    expect(roots({ cwd: "/w", command: '["/opt/app/../app/main.py"]' })).toEqual(["/opt/app", "/w"]);
    // `python -c` / no command / not JSON: the working directory only; "/" is never a root
    expect(roots({ cwd: "/w", command: '["-c"]' })).toEqual(["/w"]);
    expect(roots({ cwd: "/w", command: "train.py" })).toEqual(["/w"]);
    expect(roots({ cwd: "/", command: '["x.py"]' })).toEqual([]);
    expect(roots({ command: '["x.py"]' })).toEqual([]);
    expect(pathContext({})).toEqual({ cwd: "", roots: [] });
  });

  it("shows installed packages from the package's folder", () => {
    expect(displayPath("/x/lib/python3.11/site-packages/torch/nn/modules/linear.py", ctx)).toBe("torch/nn/modules/linear.py");
    expect(displayPath("/usr/lib/python3/dist-packages/numpy/core/numeric.py", ctx)).toBe("numpy/core/numeric.py");
    // a virtualenv inside the project is still a package
    expect(displayPath("/home/u/proj/.venv/lib/python3.12/site-packages/jax/_src/api.py", ctx)).toBe("jax/_src/api.py");
    expect(displayPath("/home/u/proj/.venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so", ctx)).toBe("torch/lib/libtorch_cpu.so");
  });

  it("shows the standard library as <stdlib>", () => {
    expect(displayPath("/usr/lib/python3.11/json/decoder.py", ctx)).toBe("<stdlib>/json/decoder.py");
    expect(displayPath("/root/.pyenv/versions/3.13.1/lib/python3.13t/threading.py", ctx)).toBe("<stdlib>/threading.py");
  });

  it("shows the program's own files relative to its folder, then to the working directory", () => {
    expect(displayPath("/home/u/proj/scripts/train.py", ctx)).toBe("train.py");
    expect(displayPath("/home/u/proj/scripts/util/io.py", ctx)).toBe("util/io.py");
    expect(displayPath("/home/u/proj/model/net.py", ctx)).toBe("model/net.py");
    expect(displayPath("/home/u/projector/a.py", ctx)).toBe("/home/u/projector/a.py");
  });

  it("leaves other paths and pseudo-files as they are", () => {
    expect(displayPath("/opt/other/lib.py", ctx)).toBe("/opt/other/lib.py");
    expect(displayPath("<frozen runpy>", ctx)).toBe("<frozen runpy>");
    expect(displayPath("", ctx)).toBe("");
    expect(displayPath("/home/u/proj/scripts/train.py", { cwd: "", roots: [] })).toBe("/home/u/proj/scripts/train.py");
  });

  it("resolves a relative path (the main script run as `deepcontext run train.py`) against the working directory", () => {
    const c = pathContext({ cwd: "/home/u/proj", command: '["train.py"]' });
    expect(fullPath("train.py", c)).toBe("/home/u/proj/train.py");
    expect(displayPath("train.py", c)).toBe("train.py");
    expect(fullPath("../other/x.py", c)).toBe("/home/u/other/x.py");
    expect(displayPath("../other/x.py", c)).toBe("/home/u/other/x.py");
    expect(fullPath("<frozen runpy>", c)).toBe("<frozen runpy>");
    expect(fullPath("x.py", { cwd: "", roots: [] })).toBe("x.py");
  });

  it("normalizes paths", () => {
    expect(normalizePath("/a/./b//c/../d")).toBe("/a/b/d");
    expect(normalizePath("/../a")).toBe("/a");
    expect(normalizePath("a/../../b")).toBe("../b");
  });

  it("frame labels keep the file's base name", () => {
    const f = { kind: ["python"], name: ["forward"], file: ["/x/site-packages/torch/nn/modules/linear.py"], line: [125], module: [""] };
    expect(frameLabel(f, 0)).toBe("forward (linear.py:125)");
  });
});
