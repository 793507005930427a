// Colours of flame-graph boxes: a hue per frame kind, the lightness varied by the frame's name so
// neighbours stay apart; a red/blue scale for the diff view.

const HUES: Record<string, [number, number]> = {
  python: [210, 60], // blue
  operator: [28, 85], // orange
  native: [35, 12], // grey-brown
  kernel: [130, 55], // green
  gpu_api: [275, 45], // purple
  memcpy: [175, 55], // teal
  memset: [175, 40],
  scope: [50, 80], // yellow
  module: [55, 65],
  step: [45, 70],
  backward: [330, 55], // pink
  thread: [0, 0], // grey
  sync: [0, 70], // red
  hlo_op: [190, 70], // cyan
  jax_op: [90, 55], // lime
  root: [0, 0],
};

export function kindColor(kind: string): string {
  const [h, s] = HUES[kind] ?? [0, 0];
  return `hsl(${h} ${s}% 60%)`;
}

function hash(s: string): number {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 16777619);
  }
  return h >>> 0;
}

const cache = new Map<string, string>();
export function frameColor(kind: string, name: string): string {
  const key = kind + "\u0000" + name;
  let c = cache.get(key);
  if (!c) {
    const [h, s] = HUES[kind] ?? [0, 0];
    const v = hash(name);
    const light = 52 + (v % 21); // 52..72
    const hh = h + ((v >> 8) % 11) - 5;
    c = `hsl(${hh} ${s}% ${light}%)`;
    cache.set(key, c);
  }
  return c;
}

/** delta in [-1, 1]: positive (grew) is red, negative (shrank) blue, 0 near white. */
export function diffColor(delta: number): string {
  const d = Math.max(-1, Math.min(1, delta));
  const light = 92 - 42 * Math.abs(d);
  return d >= 0 ? `hsl(0 75% ${light}%)` : `hsl(215 75% ${light}%)`;
}
