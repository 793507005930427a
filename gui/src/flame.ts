// The flame graph / icicle, drawn on a canvas: only boxes at least half a pixel wide are laid
// out, so a 10^6-node profile draws as fast as the few thousand boxes that are visible.

import { Layout, hitTest, layoutFlame } from "./layout";
import { Tree, frameLabel } from "./model";

export const ROW = 18;
const labelCache = new WeakMap<object, string[]>();
const FONT = "11px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace";

export interface FlameOptions {
  tree: Tree;
  values: Float64Array;
  focus: number;
  orientation: "icicle" | "flame";
  color: (node: number) => string;
  /** nodes drawn faded (search non-matches); null = none */
  dim: Uint8Array | null;
}

export class FlameGraph {
  readonly canvas: HTMLCanvasElement;
  private ctx: CanvasRenderingContext2D;
  private opts: FlameOptions | null = null;
  private layout: Layout | null = null;
  private hover = -1;
  private charW = 6.6;
  lastRenderMs = 0;

  constructor(
    private host: HTMLElement,
    private onHover: (node: number, ev: MouseEvent | null) => void,
    private onClick: (node: number, ev: MouseEvent) => void,
  ) {
    this.canvas = document.createElement("canvas");
    this.canvas.className = "flame";
    host.appendChild(this.canvas);
    this.ctx = this.canvas.getContext("2d")!;
    this.ctx.font = FONT;
    this.charW = this.ctx.measureText("MMMMMMMMMM").width / 10 || 6.6;
    this.canvas.addEventListener("mousemove", (ev) => this.move(ev));
    this.canvas.addEventListener("mouseleave", () => {
      this.hover = -1;
      this.onHover(-1, null);
      this.draw();
    });
    this.canvas.addEventListener("click", (ev) => {
      const i = this.boxAt(ev);
      if (i >= 0 && this.layout) this.onClick(this.layout.node[i], ev);
    });
  }

  set(opts: FlameOptions): void {
    this.opts = opts;
    this.render();
  }

  /** Lays out and draws; returns the milliseconds it took. */
  render(): number {
    const t0 = performance.now();
    const o = this.opts;
    if (!o) return 0;
    const width = Math.max(200, this.host.clientWidth);
    this.layout = layoutFlame(o.tree, o.values, o.focus, width, 1);
    const h = (this.layout.maxDepth + 1) * ROW + 2;
    const dpr = window.devicePixelRatio || 1;
    const cw = Math.floor(width * dpr);
    const ch = Math.floor(h * dpr);
    if (this.canvas.width !== cw || this.canvas.height !== ch) {
      this.canvas.width = cw;
      this.canvas.height = ch;
      this.canvas.style.width = `${width}px`;
      this.canvas.style.height = `${h}px`;
    }
    this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    this.hover = -1;
    this.draw();
    this.lastRenderMs = performance.now() - t0;
    this.canvas.dataset.boxes = String(this.layout.count);
    this.canvas.dataset.renderMs = this.lastRenderMs.toFixed(1);
    return this.lastRenderMs;
  }

  private y(depth: number): number {
    const l = this.layout!;
    return this.opts!.orientation === "icicle" ? depth * ROW : (l.maxDepth - depth) * ROW;
  }

  draw(): void {
    const o = this.opts;
    const l = this.layout;
    if (!o || !l) return;
    const ctx = this.ctx;
    const W = parseFloat(this.canvas.style.width);
    ctx.clearRect(0, 0, this.canvas.width, this.canvas.height);
    ctx.font = FONT;
    ctx.textBaseline = "middle";
    const f = o.tree.frames;
    let labels = labelCache.get(f);
    if (!labels) labelCache.set(f, (labels = new Array<string>(f.kind.length)));
    // boxes grouped by colour and fading: one fillStyle change per group, not per box
    const groups = new Map<string, number[]>();
    for (let i = 0; i < l.count; i++) {
      const n = l.node[i];
      const faded = o.dim !== null && !o.dim[n];
      const key = (faded ? "f" : "s") + (l.depth[i] < l.focusDepth ? "#d8d8d8" : o.color(n));
      let g = groups.get(key);
      if (!g) groups.set(key, (g = []));
      g.push(i);
    }
    for (const [key, g] of groups) {
      ctx.globalAlpha = key[0] === "f" ? 0.28 : 1;
      ctx.fillStyle = key.slice(1);
      for (const i of g) {
        const w = l.w[i] * W;
        ctx.fillRect(l.x[i] * W, this.y(l.depth[i]), Math.max(w - (w > 3 ? 1 : 0), 0.5), ROW - 1);
      }
    }
    ctx.globalAlpha = 1;
    ctx.fillStyle = "#111";
    for (let i = 0; i < l.count; i++) {
      const w = l.w[i] * W;
      if (w <= 30) continue;
      const n = l.node[i];
      const fit = Math.floor((w - 6) / this.charW);
      if (fit < 2) continue;
      const fr = o.tree.frame[n];
      const label = labels[fr] ?? (labels[fr] = frameLabel(f, fr));
      const faded = o.dim !== null && !o.dim[n];
      if (faded) ctx.globalAlpha = 0.45;
      ctx.fillText(label.length > fit ? label.slice(0, fit - 1) + "…" : label, l.x[i] * W + 3, this.y(l.depth[i]) + ROW / 2);
      if (faded) ctx.globalAlpha = 1;
    }
    if (this.hover >= 0 && this.hover < l.count) {
      const i = this.hover;
      ctx.strokeStyle = "#000";
      ctx.lineWidth = 1.5;
      ctx.strokeRect(l.x[i] * W + 0.75, this.y(l.depth[i]) + 0.75, Math.max(l.w[i] * W - 1.5, 1), ROW - 2.5);
    }
  }

  /** The drawn boxes in CSS pixels relative to the canvas (for tests and benchmarks). */
  boxes(): { node: number; label: string; x: number; y: number; w: number; h: number }[] {
    const l = this.layout;
    const o = this.opts;
    if (!l || !o) return [];
    const W = parseFloat(this.canvas.style.width);
    const out = [];
    for (let i = 0; i < l.count; i++) {
      out.push({ node: l.node[i], label: frameLabel(o.tree.frames, o.tree.frame[l.node[i]]), x: l.x[i] * W, y: this.y(l.depth[i]), w: l.w[i] * W, h: ROW });
    }
    return out;
  }

  private boxAt(ev: MouseEvent): number {
    const l = this.layout;
    if (!l) return -1;
    const r = this.canvas.getBoundingClientRect();
    const fx = (ev.clientX - r.left) / r.width;
    const row = Math.floor((ev.clientY - r.top) / ROW);
    const depth = this.opts!.orientation === "icicle" ? row : l.maxDepth - row;
    return hitTest(l, fx, depth);
  }

  private move(ev: MouseEvent): void {
    const i = this.boxAt(ev);
    if (i !== this.hover) {
      this.hover = i;
      this.draw();
    }
    this.onHover(i >= 0 && this.layout ? this.layout.node[i] : -1, ev);
  }
}
