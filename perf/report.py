"""What a run writes: results.json, results.md, PNG plots, raw samples and the tuning table.

Files in the output folder:
  results.json          every median, derived GB/s and speedups, ceilings, environment
  raw/samples.json      every replay / loop sample behind the medians (git-ignored)
  results.md            the tables
  bandwidth_vs_cache_tokens.png, bandwidth_by_shape.png, speedup_vs_best_peer.png
  tuning-<gpu-key>.json with --write-tuning (also written to fmha/tuning/<gpu-key>.json)
A preset with files of its own (`--preset window`) writes <preset>.json, <preset>.md and raw/<preset>-samples.json
instead of the first three, and no plots.
"""
from __future__ import annotations

import copy
import json
import os

from perf.timing import ceiling_text, comparable

RAW_KEYS = ("graph_raw_us", "eager_raw_us", "raw_us", "separate_raw_us")
PLOTS = ("bandwidth_vs_cache_tokens.png", "bandwidth_by_shape.png", "speedup_vs_best_peer.png")


def write_all(results: dict, out_dir: str, stem: str = "results") -> list:
    os.makedirs(os.path.join(out_dir, "raw"), exist_ok=True)
    written = [write_json(results, out_dir, stem), write_markdown(results, out_dir, stem)]
    if stem != "results":  # the plots are the full suite's
        return written
    try:
        written += write_plots(results, out_dir)
    except ImportError as e:
        print(f"no plots: {e} (pip install matplotlib)", flush=True)
    return written


# ---- JSON ------------------------------------------------------------------------------------

def _strip_raw(obj):
    if isinstance(obj, dict):
        return {k: _strip_raw(v) for k, v in obj.items() if k not in RAW_KEYS}
    if isinstance(obj, list):
        return [_strip_raw(v) for v in obj]
    return obj


def _raw_only(results):
    raw = {"ceilings": {k: v.get("raw_us") for k, v in results["ceilings"].items()
                        if isinstance(v, dict) and "raw_us" in v},
           "shapes": {}}
    for rec in results["shapes"]:
        raw["shapes"][rec["name"]] = {
            name: {k: r[k] for k in RAW_KEYS if r.get(k)} for name, r in rec["results"].items()}
    return raw


def write_json(results: dict, out_dir: str, stem: str = "results") -> str:
    path = os.path.join(out_dir, f"{stem}.json")
    with open(path, "w") as f:
        json.dump(_strip_raw(results), f, indent=1, sort_keys=False)
        f.write("\n")
    with open(os.path.join(out_dir, "raw", "samples.json" if stem == "results" else f"{stem}-samples.json"), "w") as f:
        json.dump(_raw_only(results), f)
        f.write("\n")
    return path


# ---- Markdown --------------------------------------------------------------------------------

def _cell_reason(r: dict, notes: list) -> str:
    reason = r.get("reason") or "no reason given"
    from perf.peers import short_reason
    short = short_reason(reason, 48).replace("|", "/")
    if reason not in notes:
        notes.append(reason)
    return f"{r['status']}: {short} [{notes.index(reason) + 1}]"


def _time_cell(r: dict, notes: list, best: bool) -> str:
    if not r.get("us"):
        return _cell_reason(r, notes)
    us = f"{r['us']:.1f} µs"
    cell = f"**{us}**" if best else us
    cell += f" · {r['gbps']:.0f} GB/s ({r['pct_read_ceiling']:.0f}%)"
    if r["status"] != "ok":
        cell = f"{r['status']} [{_note_index(r['reason'], notes)}] " + cell
    if r.get("timing") == "eager":
        cell += " (eager)"
    return cell


def _note_index(text: str, notes: list) -> int:
    if text not in notes:
        notes.append(text)
    return notes.index(text) + 1


def _fastest(res: dict, key: str, peers_only: bool = False):
    """(name, time) of the fastest correct contender of one shape by timing `key` ("us", "separate_us"),
    among the peers only if asked; (None, None) when none has that time."""
    times = {n: r[key] for n, r in res.items()
             if r.get(key) and r["status"] == "ok" and comparable(r) and not (peers_only and r.get("is_fmha"))}
    if not times:
        return None, None
    best = min(times, key=times.get)
    return best, times[best]


def _shape_label(rec: dict) -> str:
    window, cap = rec.get("window", -1), rec.get("softcap", 0.0)
    return (f"{rec['family']} B{rec['B']} T{rec['T']} {rec['Hq']}/{rec['Hkv']}h S{rec['S']} D{rec['D']}"
            f"{' causal' if rec['causal'] and rec['T'] > 1 else ''}{f' window {window}' if window >= 0 else ''}"
            f"{f' softcap {cap:g}' if cap else ''}{' sinks' if rec.get('sinks') else ''}")


def markdown(results: dict) -> str:
    meta, ceil = results["meta"], results["ceilings"]
    names = list(results["contenders"])
    fmha_names = [n for n in names if results["contenders"][n]["fmha"]]
    notes: list = []
    windows = any(rec.get("window", -1) >= 0 for rec in results["shapes"])
    L = [f"# fmha decode attention: {meta['gpu']}, {meta['date']}", ""]
    if meta.get("dry_run"):
        L += ["**Dry run on the CPU: tiny shapes, wall-clock times. The numbers mean nothing.**", ""]
    L += [f"Command: `{meta['command']}`  ",
          f"torch {meta['torch']}, triton {meta['triton']}, fmha {meta['fmha']}, Python {meta['python']}"
          + (f", FlashInfer {meta['flashinfer']}" if meta.get("flashinfer") else "")
          + (f", CUDA {meta['cuda']}, {meta['sm_count']} SMs, L2 {meta['l2_bytes'] / 2**20:.0f} MiB"
             if meta.get("cuda") else "") + f"; run took {meta['elapsed_s']:.0f} s.", "",
          f"{meta.get('dtype', 'bfloat16')} throughout. Time: per call, median over "
          f"{meta['replays']} CUDA-graph replays; one replay calls the contender once on each of N rotating "
          f"input sets (as many as make {meta['rotate_factor']:g}x L2, from 2 to 64), per call = replay time / N. "
          "Bandwidth: GB/s = 1e9 bytes/s (decimal) of q + k_cache + v_cache + out bytes "
          "(fmha.Problem.bytes_moved()" + ("; with a sliding window, K and V of the min(S, window + T) keys a "
                                            "sequence that its queries can see" if windows else "")
          + "); % = share of the measured HBM read ceiling. "
          f"Every output is checked on input set 0 against fmha's fp32 reference (first and last sequence; "
          f"cosine over the whole output and over each row >= {meta['min_cosine']}). Bold: fastest correct contender "
          "of the row.", ""]
    if meta.get("separate"):
        L += ["**--separate: every timed call is followed by a one-element add (a kernel without PDL, as the next "
              "op of a model would be), and the times include it.** Compare contenders within a shape; µs, GB/s "
              "and % are those of call + add.", ""]

    L += ["## HBM ceilings (measured in this run)", "",
          "| measurement | GB/s | bytes per op | median µs |", "|---|---:|---:|---:|"]
    for key in ("copy", "read_torch_sum", "read_triton"):
        e = ceil.get(key)
        if not e:
            continue
        if "gbps" in e:
            cfg = f" {e['config']}" if e.get("config") else ""
            L.append(f"| {e['what']}{cfg} | {e['gbps']:.0f} | {e['bytes'] / 1e9:.2f} GB | {e['median_us']:.1f} |")
        else:
            L.append(f"| {e['what']} | failed: {e.get('error', '')[:80]} | | |")
    L += ["", f"Read ceiling used for %: {ceiling_text(ceil)}.", ""]

    head = ["shape", "MB moved", "sets"] + names + ["best peer"] + [f"{n} vs best peer" for n in fmha_names]
    L += ["## Per call, CUDA graph", "", "| " + " | ".join(head) + " |",
          "|" + "---|" * 3 + "---:|" * (len(names) + 1 + len(fmha_names))]
    for rec in results["shapes"]:
        res = rec["results"]
        fastest, _ = _fastest(res, "us")
        row = [_shape_label(rec), f"{rec['bytes_moved'] / 1e6:.1f}", str(rec["n_sets"])]
        row += [_time_cell(res[n], notes, n == fastest) if n in res else "not run" for n in names]
        row.append(f"{rec['best_peer']} {rec['best_peer_us']:.1f} µs" if rec["best_peer"] else "none")
        for n in fmha_names:
            x = rec["speedup_vs_best_peer"].get(n)
            row.append(f"{x:.2f}x" if x else "-")
        L.append("| " + " | ".join(row) + " |")

    if meta.get("also_separate"):
        L += ["", "## Per call, CUDA graph, each call followed by a one-element add (--also-separate)", "",
              "The same contenders and inputs, every call followed in the graph by an add on a one-element "
              "tensor (a kernel launched without PDL, as the next op of a model would be): a call cannot overlap "
              "the previous call of the same op, which fmha's programmatic dependent launches otherwise do. Times "
              "include the add; compare within a row.", "",
              "| shape | " + " | ".join(names) + " | best peer | "
              + " | ".join(f"{n} vs best peer" for n in fmha_names) + " |",
              "|---|" + "---:|" * (len(names) + 1 + len(fmha_names))]
        for rec in results["shapes"]:
            res = rec["results"]
            fastest, _ = _fastest(res, "separate_us")
            best, best_us = _fastest(res, "separate_us", peers_only=True)
            cells = []
            for n in names:
                t = res.get(n, {}).get("separate_us")
                cells.append(("**{:.1f} µs**" if n == fastest else "{:.1f} µs").format(t) if t
                             else (res.get(n, {}).get("status") or "not run"))
            row = [_shape_label(rec)] + cells + [f"{best} {best_us:.1f} µs" if best else "none"]
            row += [f"{best_us / res[n]['separate_us']:.2f}x"
                    if best and res.get(n, {}).get("separate_us") and res[n]["status"] == "ok" else "-"
                    for n in fmha_names]
            L.append("| " + " | ".join(row) + " |")

    L += ["", "## Per call, eager (Python and launch overhead included)", "",
          "| shape | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for rec in results["shapes"]:
        cells = []
        for n in names:
            r = rec["results"].get(n, {})
            cells.append(f"{r['eager_us']:.1f} µs" if r.get("eager_us") else (r.get("status") or "not run"))
        L.append(f"| {_shape_label(rec)} | " + " | ".join(cells) + " |")

    extra = []
    for rec in results["shapes"]:
        for n, r in rec["results"].items():
            if r.get("compile_s") is not None:
                extra.append(f"- {rec['name']}: {n} first call (compile) {r['compile_s']:.1f} s")
            if "eager timing only" in (r.get("note") or ""):
                extra.append(f"- {rec['name']}: {n}: {r['note']}")
    L += ["", "## Notes", ""]
    L += [f"{i + 1}. {n}" for i, n in enumerate(notes)] or ["(none)"]
    L += ["", "Contenders:", ""] + [f"- **{n}**: {c['what']}" for n, c in results["contenders"].items()]
    if extra:
        L += ["", "Compile times and timing fallbacks:", ""] + extra
    return "\n".join(L) + "\n"


def write_markdown(results: dict, out_dir: str, stem: str = "results") -> str:
    path = os.path.join(out_dir, f"{stem}.md")
    with open(path, "w") as f:
        f.write(markdown(results))
    return path


# ---- plots -----------------------------------------------------------------------------------

def write_plots(results: dict, out_dir: str) -> list:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta, ceil = results["meta"], results["ceilings"]
    names = list(results["contenders"])
    shapes = results["shapes"]
    title = f"{meta['gpu']}, {meta['date']}" + (" (DRY RUN, CPU)" if meta.get("dry_run") else "")
    paths = []

    # 1. bandwidth against cache tokens, the GQA D=128 T=1 family (small + serving)
    fam = [r for r in shapes if r["family"] in ("small", "serve")]
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for n in names:
        pts = sorted((r["tokens"], r["B"], r["results"][n]["gbps"]) for r in fam
                     if r["results"].get(n, {}).get("gbps") and r["results"][n]["status"] == "ok")
        if pts:
            ax.plot([p[0] for p in pts], [p[2] for p in pts], marker="o", label=n,
                    linewidth=2.2 if results["contenders"][n]["fmha"] else 1.2)
    ax.axhline(ceil["read_gbps"], color="k", linestyle="--", linewidth=1,
               label=f"read ceiling {ceil['read_gbps']:.0f}")
    ax.axhline(ceil["copy_gbps"], color="gray", linestyle=":", linewidth=1,
               label=f"copy ceiling {ceil['copy_gbps']:.0f}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("cache tokens per call, B x S (log2)")
    ax.set_ylabel("GB/s (1e9 B/s) of q + k + v + out")
    ax.set_title(f"Decode bandwidth, T=1, Hq=32, Hkv=8, D=128, {meta.get('dtype', 'bfloat16')} - {title}",
                 fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(_save(fig, out_dir, PLOTS[0], plt))

    # 2. bandwidth of every contender on every shape
    labels = [_short_label(r) for r in shapes]
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(shapes) * max(1, len(names)) / 3 + 2))
    h = 0.8 / max(1, len(names))
    for j, n in enumerate(names):
        vals = [r["results"].get(n, {}).get("gbps") or 0.0 if r["results"].get(n, {}).get("status") == "ok" else 0.0
                for r in shapes]
        ax.barh([i + j * h for i in range(len(shapes))], vals, height=h, label=n)
    ax.axvline(ceil["read_gbps"], color="k", linestyle="--", linewidth=1, label="read ceiling")
    _finish_barh(fig, ax, len(shapes), h, labels, "GB/s (1e9 B/s); missing bar = unsupported, skipped or wrong",
                 f"Decode bandwidth by shape - {title}", legend_size=7)
    paths.append(_save(fig, out_dir, PLOTS[1], plt))

    # 3. speedup of each fmha backend over the best peer
    fmha_names = [n for n in names if results["contenders"][n]["fmha"]]
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(shapes) * max(1, len(fmha_names)) + 2))
    h = 0.8 / max(1, len(fmha_names))
    for j, n in enumerate(fmha_names):
        vals = [r["speedup_vs_best_peer"].get(n) or 0.0 for r in shapes]
        bars = ax.barh([i + j * h for i in range(len(shapes))], vals, height=h, label=n)
        for b, v in zip(bars, vals):
            if v:
                ax.text(b.get_width(), b.get_y() + b.get_height() / 2, f" {v:.2f}x", va="center", fontsize=7)
    ax.axvline(1.0, color="k", linewidth=1)
    _finish_barh(fig, ax, len(shapes), h, [f"{lab}\nvs {r['best_peer'] or 'no peer'}" for lab, r in zip(labels, shapes)],
                 "speedup over the fastest correct peer (>1: fmha faster)",
                 f"fmha vs best of SDPA / FlexAttention - {title}", legend_size=8)
    paths.append(_save(fig, out_dir, PLOTS[2], plt))
    return paths


def _short_label(rec: dict) -> str:
    return (f"B{rec['B']} T{rec['T']} {rec['Hq']}/{rec['Hkv']} S{rec['S']} D{rec['D']}")


def _save(fig, out_dir, name, plt) -> str:
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _finish_barh(fig, ax, n_rows, h, labels, xlabel, title, legend_size):
    """Shared layout of the horizontal bar charts: one labelled row per shape, top to bottom."""
    ax.set_yticks([i + 0.4 - h / 2 for i in range(n_rows)])
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=legend_size, loc="lower right")
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()


# ---- tuning table ----------------------------------------------------------------------------

def tuning_table(results: dict) -> dict:
    """The dispatcher's table (fmha/tuning.py): per shape, every fmha backend's median µs or null."""
    fmha_names = [n for n, c in results["contenders"].items() if c["fmha"]]
    keys = list(dict.fromkeys(["cuda", "triton"] + fmha_names))
    entries = []
    for rec in results["shapes"]:
        med = {}
        for n in keys:
            r = rec["results"].get(n, {})
            med[n] = round(r["us"], 3) if r.get("status") == "ok" and r.get("us") and comparable(r) else None
        if any(v is not None for v in med.values()):
            entries.append({"B": rec["B"], "T": rec["T"], "G": rec["G"], "S": rec["S"], "D": rec["D"],
                            "Hq": rec["Hq"], "Hkv": rec["Hkv"], "causal": rec["causal"], "shape": rec["name"],
                            "median_us": med})
    meta = results["meta"]
    return {"gpu": meta["gpu"], "date": meta["date"], "command": meta["command"],
            "torch": meta["torch"], "triton": meta["triton"],
            "timing": "median per-call CUDA-graph time, bf16, full caches (contenders that could not be captured "
                      "are left out)",
            "entries": entries}


def write_tuning(results: dict, out_dir: str, to_package: bool = True) -> list:
    table = tuning_table(results)
    key = results["meta"]["gpu_key"]
    paths = [os.path.join(out_dir, f"tuning-{key}.json")]
    if to_package:
        from fmha.tuning import TABLE_DIR
        os.makedirs(TABLE_DIR, exist_ok=True)
        paths.append(os.path.join(TABLE_DIR, f"{key}.json"))
    for path in paths:
        with open(path, "w") as f:
            json.dump(copy.deepcopy(table), f, indent=1)
            f.write("\n")
    return paths
