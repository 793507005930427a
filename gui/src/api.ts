// Loading profiles from the local server (python/deepcontext/gui_server.py): JSON for metadata and
// frames, little-endian binary arrays for the per-node data.

import { Frames, MetricInfo, Tree, makeTree, setWholes } from "./model";

export interface ProfileInfo {
  path: string;
  meta: Record<string, string>;
  notes: string[];
  metrics: (MetricInfo & { empty?: boolean })[];
  nodes: number;
  frames: number;
  default_metric: string;
}

export interface Info {
  kinds: string[];
  profiles: ProfileInfo[];
  baseline: boolean;
}

export interface Finding {
  rule: string;
  title: string;
  summary: string;
  metric: string;
  time: number;
  share: number;
  saving: number;
  saving_share: number;
  estimate: string;
  suggestion: string;
  location: { node?: number | null; path?: string[]; source?: string | null; module?: string | null; operators?: string[]; kernels?: string[] };
  evidence: Record<string, unknown>;
  nodes: number[];
}

export interface Findings {
  available: boolean;
  findings: Finding[];
  error?: string;
}

export interface DiffEntry {
  path: string[];
  status: string;
  base_inclusive: number;
  inclusive: number;
  base_exclusive: number;
  exclusive: number;
  base_node: number;
  node: number;
}

export interface DiffList {
  available: boolean;
  metric?: string;
  unit?: string;
  total?: number;
  base_total?: number;
  count?: number;
  entries: DiffEntry[];
}

const apiBase = () => new URL("api/", window.location.href.split("#")[0]);

async function get(path: string): Promise<Response> {
  const r = await fetch(new URL(path, apiBase()), { cache: "no-store" });
  if (!r.ok) {
    let msg = `${r.status} ${r.statusText}`;
    try {
      msg = (await r.json()).error ?? msg;
    } catch {
      /* not JSON */
    }
    throw new Error(`${path}: ${msg}`);
  }
  return r;
}

export async function getJSON<T>(path: string): Promise<T> {
  return (await get(path)).json() as Promise<T>;
}

export async function loadInfo(): Promise<Info> {
  return getJSON<Info>("info");
}

export async function loadTree(p: number, info: ProfileInfo): Promise<Tree> {
  const [frames, nodes, metrics] = await Promise.all([
    getJSON<Frames>(`frames?p=${p}`),
    get(`nodes?p=${p}`).then((r) => r.arrayBuffer()),
    get(`metrics?p=${p}`).then((r) => r.arrayBuffer()),
  ]);
  const n = info.nodes;
  const parent = new Int32Array(nodes, 0, n);
  const frame = new Int32Array(nodes, 4 * n, n);
  const inc: Record<string, Float64Array> = {};
  const exc: Record<string, Float64Array> = {};
  let k = 0;
  for (const m of info.metrics) {
    if (m.empty) {
      inc[m.name] = new Float64Array(n);
      exc[m.name] = new Float64Array(n);
      continue;
    }
    inc[m.name] = new Float64Array(metrics, 16 * n * k, n);
    exc[m.name] = new Float64Array(metrics, 16 * n * k + 8 * n, n);
    k++;
  }
  return setWholes(makeTree(parent, frame, frames, info.metrics, inc, exc), info.meta);
}

export async function loadSource(p: number, file: string): Promise<{ file: string; path: string; text: string }> {
  return getJSON(`source?p=${p}&file=${encodeURIComponent(file)}`);
}
