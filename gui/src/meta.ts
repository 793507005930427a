// What the GUI tells the user from a profile's metadata (the `meta` table, sent by the server's
// info endpoint as strings).

/** "2026-12-07T15:58:57Z" as "2026-12-07 15:58:57 UTC"; anything else as given. */
export function formatTime(iso: string): string {
  const m = /^(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(?:\.\d+)?Z$/.exec(iso);
  return m ? `${m[1]} ${m[2]} UTC` : iso;
}

function formatSeconds(s: number): string {
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

/**
 * The warning for a profile written at a checkpoint of a program that did not finish (the core
 * writes `complete` = "0" at every checkpoint and "1" only in the final write), or null for a
 * finished one. Every write also sets `end_time`, so in a partial profile it is the time of the
 * last checkpoint: the data stops there. Profiles without the key (older ones) count as finished.
 */
export function partialNotice(meta: Record<string, string>, what = "profile"): string | null {
  const c = (meta.complete ?? "").trim().toLowerCase();
  if (c !== "0" && c !== "false") return null;
  let s = `Partial ${what}: the program did not finish`;
  const end = meta.end_time;
  if (end) {
    s += `; data up to ${formatTime(end)}`;
    // both times are whole seconds: their difference is within a second of the true one
    const secs = Math.round((Date.parse(end) - Date.parse(meta.start_time ?? "")) / 1000);
    if (secs === 0) s += " (less than 1 s after the start)";
    else if (secs > 0) s += ` (about ${formatSeconds(secs)} after the start)`;
  }
  return s + ".";
}
