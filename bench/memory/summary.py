#!/usr/bin/env python3
"""Summary of a bench/memory/run.sh CSV for bench/RESULTS.md: a Markdown table of seven samples spread over the run,
then per node the RSS after warm-up (first 10 minutes excluded), the largest size of each log, and the GTID lookups'
p99 per interval — wall time, and its parts: the wait for the served binlog's lock and the thread's CPU time.
Usage: bench/memory/summary.py CSV"""
import csv
import sys

rows = list(csv.DictReader(open(sys.argv[1])))
MiB = 1 << 20


def f(r, k):
    return float(r.get(k) or 0)


print("| t (s) | acknowledged | RSS n1 / n2 / n3 MiB | served binlog MiB (n2) | global log MiB n1 / n2 "
      "| mariadbd binlog MiB (n2) | lookup p99 n2 / n3 µs (lock, CPU) | replicas behind |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
n = len(rows)
for i in sorted({1, n // 6, n // 3, n // 2, 2 * n // 3, 5 * n // 6, n - 1}):
    r = rows[i]
    lookups = " / ".join(f"{int(f(r, f'n{k}_lookup_p99_us')):,} ({int(f(r, f'n{k}_lookup_wait_p99_us'))}, "
                         f"{int(f(r, f'n{k}_lookup_cpu_p99_us'))})" for k in (2, 3))
    # The sample after the load ended may carry t = 0 (TRANSACTIONS runs): shown as "end".
    t = f"{int(f(r, 't')):,}" if i == 0 or f(r, "t") > 0 else "end"
    print(f"| {t} | {int(f(r, 'acked')):,} | "
          f"{f(r, 'n1_rss_kb') / 1024:.1f} / {f(r, 'n2_rss_kb') / 1024:.1f} / {f(r, 'n3_rss_kb') / 1024:.1f} | "
          f"{f(r, 'n2_served_bytes') / MiB:,.0f} | {f(r, 'n1_log_bytes') / MiB:,.0f} / {f(r, 'n2_log_bytes') / MiB:,.0f} | "
          f"{f(r, 'n2_binlog_bytes') / MiB:,.0f} | {lookups} | {int(f(r, 'n2_lag')):,} / {int(f(r, 'n3_lag')):,} |")
warm = [r for r in rows if f(r, "t") >= 600] or rows
for node in (1, 2, 3):
    vals = [f(r, f"n{node}_rss_kb") for r in warm]
    print(f"n{node}: RSS after warm-up {min(vals) / 1024:.1f}-{max(vals) / 1024:.1f} MiB, first {vals[0] / 1024:.1f}, "
          f"last {vals[-1] / 1024:.1f} ({(vals[-1] - vals[0]) / vals[0] * 100:+.1f} %), "
          f"peak {(max(vals) - vals[0]) / vals[0] * 100:+.1f} % over the first")
for node in (1, 2, 3):
    print(f"n{node}: largest served binlog {max(f(r, f'n{node}_served_bytes') for r in rows) / MiB:,.0f} MiB, "
          f"global log {max(f(r, f'n{node}_log_bytes') for r in rows) / MiB:,.0f} MiB, "
          f"mariadbd binlog {max(f(r, f'n{node}_binlog_bytes') for r in rows) / MiB:,.0f} MiB")
for node in (2, 3):
    for label, key in (("wall", "lookup_p99_us"), ("lock wait", "lookup_wait_p99_us"), ("CPU", "lookup_cpu_p99_us")):
        p = sorted(int(f(r, f"n{node}_{key}")) for r in rows[1:])
        if p:
            over = sum(1 for x in p if x > 1000)
            print(f"n{node}: lookup {label} p99 per interval: median {p[len(p) // 2]} µs, max {p[-1]}, "
                  f"> 1 ms in {over} of {len(p)}")
print(f"rate: {int(f(rows[-1], 'acked')) / max(max(f(r, 't') for r in rows), 1):,.0f} transactions/s acknowledged")
