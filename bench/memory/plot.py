#!/usr/bin/env python3
"""Draws the samples of bench/memory/run.sh as an SVG (no plotting library needed): per node, RSS of the node
process (MB) and on-disk bytes of its served binlog and of its global-log store (MiB), against time; with the
soak's columns also the bytes of each mariadbd's own binlog files, the p99 of the served binlog's GTID lookups per
interval (µs) and the transactions acknowledged.
Usage: bench/memory/plot.py [CSV=bench/memory/samples.csv] [SVG=bench/memory/memory.svg] [TITLE]"""
import csv
import sys

src = sys.argv[1] if len(sys.argv) > 1 else "bench/memory/samples.csv"
dst = sys.argv[2] if len(sys.argv) > 2 else "bench/memory/memory.svg"
title = sys.argv[3] if len(sys.argv) > 3 else "paxsql 3 nodes, sysbench oltp_insert through the RW port"

with open(src) as f:
    rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]
if not rows:
    sys.exit(f"{src}: no samples")

W, H, PAD = 900, 300, 60
COLORS = {1: "#1f77b4", 2: "#d62728", 3: "#2ca02c"}


def panel(y0, label, series, unit):
    """One chart: `series` is a list of (name, node, values)."""
    t = [r["t"] for r in rows]
    tmax = max(t) or 1
    vmax = max(max(v) for _, _, v in series) or 1
    vmax *= 1.1
    out = [f'<text x="{PAD}" y="{y0 - 10}" font-size="14" font-weight="bold">{label}</text>']
    out.append(f'<rect x="{PAD}" y="{y0}" width="{W - 2 * PAD}" height="{H - 2 * PAD}" fill="none" stroke="#888"/>')
    for k in range(5):
        v = vmax * k / 4
        y = y0 + (H - 2 * PAD) * (1 - k / 4)
        label = f"{v:.0f}" if vmax >= 20 else f"{v:.1f}"
        out.append(f'<text x="{PAD - 5}" y="{y + 4}" font-size="11" text-anchor="end">{label}</text>')
        out.append(f'<line x1="{PAD}" x2="{W - PAD}" y1="{y}" y2="{y}" stroke="#eee"/>')
    for k in range(5):
        tt = tmax * k / 4
        x = PAD + (W - 2 * PAD) * k / 4
        out.append(f'<text x="{x}" y="{y0 + H - 2 * PAD + 15}" font-size="11" text-anchor="middle">{tt:.0f} s</text>')
    for name, node, values in series:
        pts = " ".join(
            f"{PAD + (W - 2 * PAD) * ti / tmax:.1f},{y0 + (H - 2 * PAD) * (1 - v / vmax):.1f}"
            for ti, v in zip(t, values)
        )
        dash = ' stroke-dasharray="6,3"' if name.startswith("global") else ""
        out.append(f'<polyline points="{pts}" fill="none" stroke="{COLORS[node]}" stroke-width="2"{dash}/>')
    legend_x = W - PAD - 230
    for i, (name, node, _) in enumerate(series):
        y = y0 + 15 + 14 * i
        dash = ' stroke-dasharray="6,3"' if name.startswith("global") else ""
        out.append(f'<line x1="{legend_x}" x2="{legend_x + 20}" y1="{y - 4}" y2="{y - 4}" stroke="{COLORS[node]}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{legend_x + 25}" y="{y}" font-size="11">{name} n{node} ({unit})</text>')
    return out


rss = [(f"RSS", n, [r[f"n{n}_rss_kb"] / 1024 for r in rows]) for n in (1, 2, 3)]
disk = [(f"served binlog", n, [r[f"n{n}_served_bytes"] / 2**20 for r in rows]) for n in (1, 2, 3)]
disk += [(f"global log", n, [r[f"n{n}_log_bytes"] / 2**20 for r in rows]) for n in (1, 2, 3)]
if "acked" in rows[0]:
    title += f" ({int(rows[-1]['acked']):,} transactions acknowledged)"
body = [f'<text x="{PAD}" y="25" font-size="16">{title}</text>']
body += panel(70, "RSS of each node process", rss, "MB")
body += panel(70 + H, "Disk: served binlog (solid) and global-log store (dashed)", disk, "MiB")
panels = 2
if "n1_binlog_bytes" in rows[0]:
    own = [(f"mariadbd binlog", n, [r[f"n{n}_binlog_bytes"] / 2**30 for r in rows]) for n in (1, 2, 3)]
    body += panel(70 + 2 * H, "Disk: each mariadbd's own binlog files (not purged by paxsql)", own, "GiB")
    # An interval without lookups (the master does none) has no p99: drawn as 0.
    p99 = [(f"lookup p99", n, [max(r[f"n{n}_lookup_p99_us"], 0) for r in rows]) for n in (1, 2, 3)]
    body += panel(70 + 3 * H, "Served binlog GTID lookups: p99 per interval (bucket upper bound)", p99, "µs")
    panels = 4
svg = f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{panels * H + 60}" font-family="sans-serif">\n'
svg += "\n".join(body) + "\n</svg>\n"
with open(dst, "w") as f:
    f.write(svg)
print(f"wrote {dst} ({len(rows)} samples)")
