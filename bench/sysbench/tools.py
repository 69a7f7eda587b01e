#!/usr/bin/env python3
"""Helpers for bench/sysbench/run.sh (standard library only).

  snap    one line of key=value counters: CPU ticks of named processes, of the whole machine, disk writes/flushes
  lag     sample the master's and the replicas' GTID positions until told to stop and every replica caught up
  report  parse the sysbench outputs, the lag samples and the profile snapshots; write table.md, summary.md, SVG
"""
import argparse
import csv
import glob
import json
import os
import re
import subprocess
import sys
import threading
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------------------- snap
def proc_ticks(pid):
    """user+system CPU ticks of a process and its threads (fields 14, 15 of /proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return int(rest[11]) + int(rest[12])
    except (OSError, IndexError, ValueError):
        return -1


def root_disk():
    """The block device under / (vda, sda, nvme0n1 ...): whole disk, not partition."""
    dev = os.stat("/").st_dev
    major, minor = os.major(dev), os.minor(dev)
    try:
        name = os.path.basename(os.path.realpath(f"/sys/dev/block/{major}:{minor}"))
        if os.path.exists(f"/sys/class/block/{name}/partition"):
            name = os.path.basename(os.path.dirname(os.path.realpath(f"/sys/class/block/{name}")))
        return name
    except OSError:
        return None


def cmd_snap(args):
    out = {"time": time.time()}
    for item in args.procs.split():
        name, pid = item.split("=")
        out[f"cpu.{name}"] = proc_ticks(pid)
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    out["machine.busy"] = sum(cpu) - cpu[3] - cpu[4]  # everything except idle and iowait
    out["machine.total"] = sum(cpu)
    disk = root_disk()
    with open("/proc/diskstats") as f:
        for line in f:
            p = line.split()
            if p[2] == disk:
                out["disk.writes"] = int(p[7])
                out["disk.sectors_written"] = int(p[9])
                out["disk.flushes"] = int(p[18]) if len(p) > 18 else -1
                out["disk.flush_ms"] = int(p[19]) if len(p) > 19 else -1
    print(json.dumps(out))


# ----------------------------------------------------------------------------------------------------------- lag
class Session:
    """One `mariadb` client kept open (unbuffered batch mode): a query costs a round trip, not a process start."""

    def __init__(self, endpoint):
        # "host:port", or a unix socket path (a paxsql replica's mariadbd takes no TCP login).
        if endpoint.startswith("/"):
            where = ["--socket", endpoint]
        else:
            host, port = endpoint.rsplit(":", 1)
            where = ["-h", host, "-P", port]
        self.p = subprocess.Popen(
            ["mariadb", *where, "-uapp", "-N", "-B", "-n"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def value(self, sql):
        self.p.stdin.write(sql + ";\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def close(self):
        self.p.kill()


def domain0_seq(gtids):
    """Highest seq_no of domain 0 in a GTID list like '0-1-1234,1-2-5' (0 when empty)."""
    best = 0
    for g in gtids.split(","):
        parts = g.strip().split("-")
        if len(parts) == 3 and parts[0] == "0":
            best = max(best, int(parts[2]))
    return best


def cmd_lag(args):
    """Master every 50 ms (gtid_binlog_pos: what its binlog holds), each replica every 250 ms (gtid_slave_pos: what
    it has applied). Rows: t, source, seq. Stops when the stop file exists and every replica reached the master."""
    master = Session(args.master)
    replicas = [(r.split("=")[0], Session(r.split("=")[1])) for r in args.replicas.split()]
    t0 = time.time()
    tick = 0
    with open(args.out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t", "source", "seq"])
        while time.time() - t0 < args.max_seconds:
            t = time.time() - t0
            m = domain0_seq(master.value("SELECT @@gtid_binlog_pos"))
            w.writerow([f"{t:.4f}", "master", m])
            if tick % 5 == 0:
                done = True
                for name, s in replicas:
                    r = domain0_seq(s.value("SELECT @@gtid_slave_pos"))
                    w.writerow([f"{time.time() - t0:.4f}", name, r])
                    done = done and r >= m
                if done and os.path.exists(args.stop_file):
                    break
            tick += 1
            f.flush()
            time.sleep(max(0.0, t0 + tick * 0.05 - time.time()))
    master.close()
    for _, s in replicas:
        s.close()


def lag_series(path):
    """Per replica: (t, transactions behind, ms behind). ms behind = age of the oldest transaction the master's
    binlog held that the replica has not applied (0 when it has everything), from the master's 50 ms samples,
    interpolated linearly between them."""
    master, reps = [], {}
    with open(path) as f:
        for row in csv.DictReader(f):
            t, seq = float(row["t"]), int(row["seq"])
            if row["source"] == "master":
                master.append((t, seq))
            else:
                reps.setdefault(row["source"], []).append((t, seq))
    out = {}
    for name, samples in reps.items():
        series = []
        for t, s in samples:
            past = [m for m in master if m[0] <= t]
            if not past:
                continue
            m_now = past[-1][1]
            if m_now <= s:
                series.append((t, 0, 0.0))
                continue
            # first master sample holding seq s+1, and the one before it
            i = next(k for k, m in enumerate(past) if m[1] >= s + 1)
            if i == 0:
                t_first = past[0][0]
            else:
                (ta, sa), (tb, sb) = past[i - 1], past[i]
                t_first = ta + (tb - ta) * (s + 1 - sa) / (sb - sa)
            series.append((t, m_now - s, max(0.0, (t - t_first) * 1000)))
        out[name] = series
    return master, out


# -------------------------------------------------------------------------------------------------------- report
def parse_sysbench(path):
    text = open(path).read()
    res = {}
    for key, pattern in (("tps", r"transactions:\s+\d+\s+\(([\d.]+) per sec"),
                         ("qps", r"queries:\s+\d+\s+\(([\d.]+) per sec"),
                         ("p95", r"95th percentile:\s+([\d.]+)"),
                         ("avg", r"avg:\s+([\d.]+)")):
        m = re.search(pattern, text)
        if m:
            res[key] = float(m.group(1))
    res["series"] = [(int(a), float(b)) for a, b in re.findall(r"\[ (\d+)s \] thds: \d+ tps: ([\d.]+)", text)]
    return res


def load_profile(d):
    def read(prefix):
        try:
            proc = json.loads(open(f"{d}/{prefix}.proc").read())
            status = {}
            for line in open(f"{d}/{prefix}.status"):
                k, v = line.split("\t")
                status[k] = float(v)
            return proc, status
        except (OSError, ValueError):
            return None
    a, b = read("profile-before"), read("profile-after")
    if not a or not b:
        return None
    (pa, sa), (pb, sb) = a, b
    secs = pb["time"] - pa["time"]
    prof = {"seconds": secs, "cpu": {}, "status": {k: sb[k] - sa.get(k, 0) for k in sb}}
    prof["status_abs"] = sb
    for k in pb:
        if k.startswith("cpu.") and pa.get(k, -1) >= 0 and pb[k] >= 0:
            prof["cpu"][k[4:]] = (pb[k] - pa[k]) / CLK_TCK / secs  # cores used
    prof["machine_busy"] = (pb["machine.busy"] - pa["machine.busy"]) / max(1, pb["machine.total"] - pa["machine.total"])
    for k in ("disk.writes", "disk.flushes", "disk.flush_ms", "disk.sectors_written"):
        if k in pa and k in pb and pa[k] >= 0:
            prof[k] = (pb[k] - pa[k]) / secs
    return prof


def perf_table(res, systems):
    """Per process: fsync+fdatasync and write+pwrite64 calls per second during oltp_insert 64 (perf stat)."""
    rows = ["| system | process | fsync+fdatasync /s | write+pwrite /s | fsyncs per transaction |",
            "|---|---|---:|---:|---:|"]
    extra = []
    for s in systems:
        p = load_profile(f"{res}/{s}")
        secs = p["seconds"] if p else None
        tps = parse_sysbench(f"{res}/{s}/oltp_insert-64.txt").get("tps") if os.path.exists(
            f"{res}/{s}/oltp_insert-64.txt") else None
        for path in sorted(glob.glob(f"{res}/{s}/profile-*.perf")):
            name = os.path.basename(path)[len("profile-"):-len(".perf")]
            counts = {}
            for line in open(path):
                parts = line.strip().split(",")
                if len(parts) > 2 and parts[2].startswith("syscalls:"):
                    try:
                        counts[parts[2].split("_enter_")[1]] = float(parts[0])
                    except ValueError:
                        pass
            if not counts or not secs:
                continue
            fs = (counts.get("fsync", 0) + counts.get("fdatasync", 0)) / secs
            wr = (counts.get("write", 0) + counts.get("pwrite64", 0)) / secs
            rows.append(f"| {s} | {name} | {fmt(fs)} | {fmt(wr)} | {fmt(fs / tps if tps else None, 2)} |")
        if p and p["status"].get("Paxos_applied_instance") and p["status"].get("Binlog_commits"):
            inst, trx = p["status"]["Paxos_applied_instance"], p["status"]["Binlog_commits"]
            extra.append(f"paxsql: {inst:,.0f} Paxos instances chosen for {trx:,.0f} transactions committed on the "
                         f"master during the run = {trx / inst:.2f} transactions per instance (MariaDB grouped "
                         f"{trx / p['status']['Binlog_group_commits']:.1f} per binlog group commit).")
    if len(rows) == 2:
        return "(no perf counts)"
    return ("System calls per process during oltp_insert 64 threads (`perf stat` tracepoints):\n\n"
            + "\n".join(rows) + ("\n\n" + "\n".join(extra) if extra else ""))


def fmt(x, digits=0):
    return "–" if x is None else f"{x:,.{digits}f}"


def ratio(a, b):
    return None if a is None or not b else a / b


COLORS = {"standalone": "#555555", "semisync": "#d62728", "paxsql": "#1f77b4",
          "semi-r1": "#d62728", "semi-r2": "#ff9896", "paxsql-n1": "#1f77b4", "paxsql-n2": "#1f77b4",
          "paxsql-n3": "#6baed6"}


def svg_plot(path, title, panels):
    """panels: list of (y label, {series name: [(x, y)]}). One x axis (seconds) for all; plain SVG."""
    W, PH, L, R, T, GAP = 820, 200, 70, 150, 40, 50
    H = T + len(panels) * (PH + GAP)
    xs = [x for _, series in panels for pts in series.values() for x, _ in pts]
    xmax = max(xs) if xs else 1
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15">{title}</text>']
    for i, (label, series) in enumerate(panels):
        top = T + i * (PH + GAP)
        ys = [y for pts in series.values() for _, y in pts]
        ymax = max(ys) if ys and max(ys) > 0 else 1
        ymax = nice(ymax)
        pw = W - L - R
        sx = lambda x: L + pw * x / xmax
        sy = lambda y: top + PH - PH * y / ymax
        out.append(f'<rect x="{L}" y="{top}" width="{pw}" height="{PH}" fill="none" stroke="#999"/>')
        for k in range(6):
            y = ymax * k / 5
            out.append(f'<line x1="{L}" x2="{L + pw}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" stroke="#eee"/>')
            out.append(f'<text x="{L - 5}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:g}</text>')
        for k in range(11):
            x = xmax * k / 10
            out.append(f'<text x="{sx(x):.1f}" y="{top + PH + 15}" text-anchor="middle">{x:.0f}</text>')
        out.append(f'<text x="{L + pw / 2}" y="{top + PH + 30}" text-anchor="middle">seconds</text>')
        out.append(f'<text x="15" y="{top + PH / 2}" transform="rotate(-90 15 {top + PH / 2})" '
                   f'text-anchor="middle">{label}</text>')
        for j, (name, pts) in enumerate(series.items()):
            color = COLORS.get(name, "#2ca02c")
            dash = ' stroke-dasharray="5,3"' if name.endswith(("r2", "n3")) else ""
            d = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
            out.append(f'<polyline points="{d}" fill="none" stroke="{color}" stroke-width="1.5"{dash}/>')
            ly = top + 15 + 16 * j
            out.append(f'<line x1="{L + pw + 10}" x2="{L + pw + 30}" y1="{ly}" y2="{ly}" stroke="{color}" '
                       f'stroke-width="2"{dash}/>')
            out.append(f'<text x="{L + pw + 35}" y="{ly + 4}">{name}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def nice(v):
    e = 10 ** len(str(int(v))) / 10 if v >= 1 else 1
    for m in (1, 2, 2.5, 5, 10):
        if m * e >= v:
            return m * e
    return v


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None


def cmd_report(args):
    res = args.results
    meta = open(f"{res}/meta.txt").read()
    systems = [s for s in ("standalone", "semisync", "paxsql") if os.path.isdir(f"{res}/{s}")]
    runs = {}
    for s in systems:
        for p in glob.glob(f"{res}/{s}/oltp_*-*.txt"):
            test, threads = os.path.basename(p)[:-4].rsplit("-", 1)
            runs[(s, test, int(threads))] = parse_sysbench(p)
    combos = sorted({(t, n) for _, t, n in runs}, key=lambda c: (["oltp_insert", "oltp_read_write",
                                                                 "oltp_point_select"].index(c[0]), c[1]))
    lines = ["| test | threads | standalone TPS | semi-sync TPS | paxsql TPS | standalone p95 ms | semi-sync p95 ms "
             "| paxsql p95 ms | paxsql/semi-sync | paxsql/standalone |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for t, n in combos:
        g = lambda s, k: runs.get((s, t, n), {}).get(k)
        lines.append(f"| {t} | {n} | {fmt(g('standalone', 'tps'))} | {fmt(g('semisync', 'tps'))} | "
                     f"{fmt(g('paxsql', 'tps'))} | {fmt(g('standalone', 'p95'), 2)} | {fmt(g('semisync', 'p95'), 2)} | "
                     f"{fmt(g('paxsql', 'p95'), 2)} | {fmt(ratio(g('paxsql', 'tps'), g('semisync', 'tps')), 2)}× | "
                     f"{fmt(ratio(g('paxsql', 'tps'), g('standalone', 'tps')), 2)}× |")
    table = "\n".join(lines)

    # targets (issue 6): oltp_insert 64 threads
    g = lambda s: runs.get((s, "oltp_insert", 64), {}).get("tps")
    targets = []
    r1, r2 = ratio(g("paxsql"), g("semisync")), ratio(g("paxsql"), g("standalone"))
    if r1 is not None:
        targets.append(f"- oltp_insert 64 threads, paxsql/semi-sync = {r1:.2f}× (target ≥ 1.2×): "
                       f"{'met' if r1 >= 1.2 else 'MISSED'}")
    if r2 is not None:
        targets.append(f"- oltp_insert 64 threads, paxsql/standalone = {r2:.2f}× (target ≥ 0.85×): "
                       f"{'met' if r2 >= 0.85 else 'MISSED'}")

    # profile of oltp_insert 64 on each system
    plines = ["| system | TPS | commits per binlog group commit | ACK wait avg ms | disk flushes/s "
              "| ms per flush | disk writes/s | MB/s written | CPU cores: mariadbd (master) | other mariadbd | paxsql nodes "
              "| machine busy |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in systems:
        p = load_profile(f"{res}/{s}")
        if not p:
            continue
        st, sa, cpu = p["status"], p["status_abs"], p["cpu"]
        group = st.get("Binlog_commits", 0) / st["Binlog_group_commits"] if st.get("Binlog_group_commits") else None
        # MariaDB keeps a running average since start: recover the total wait before and after this run
        avg_b, n_b = sa.get("Rpl_semi_sync_master_tx_avg_wait_time"), sa.get("Rpl_semi_sync_master_tx_waits")
        dn = st.get("Rpl_semi_sync_master_tx_waits")
        ack = None
        if s != "standalone" and None not in (avg_b, n_b, dn) and dn > 0:
            avg_a, n_a = avg_b - st["Rpl_semi_sync_master_tx_avg_wait_time"], n_b - dn
            ack = (avg_b * n_b - avg_a * n_a) / dn / 1000
        master_name = {"standalone": "mariadbd", "semisync": "semi-m"}.get(s)
        if s == "paxsql":
            # the master's mariadbd: the one whose node runs the write path (highest mariadbd CPU)
            md = {k: v for k, v in cpu.items() if k.endswith("-mariadbd")}
            master_name = max(md, key=md.get) if md else None
        m_cpu = cpu.get(master_name)
        other = sum(v for k, v in cpu.items() if k != master_name and not k.endswith("-node"))
        nodes = sum(v for k, v in cpu.items() if k.endswith("-node"))
        tps = runs.get((s, "oltp_insert", 64), {}).get("tps")
        plines.append(f"| {s} | {fmt(tps)} | {fmt(group, 1)} | {fmt(ack, 2)} | {fmt(p.get('disk.flushes'))} | "
                      f"{fmt(p['disk.flush_ms'] / p['disk.flushes'] if p.get('disk.flushes') else None, 2)} | "
                      f"{fmt(p.get('disk.writes'))} | {fmt(p.get('disk.sectors_written', 0) * 512 / 1e6, 1)} | "
                      f"{fmt(m_cpu, 2)} | {fmt(other if other else None, 2)} | {fmt(nodes if nodes else None, 2)} | "
                      f"{p['machine_busy'] * 100:.0f} % |")
    profile = "\n".join(plines) if len(plines) > 2 else "(no profile)"
    syscalls = perf_table(res, systems)

    # lag: one table and one plot per lag run (unthrottled, then at a fixed rate)
    lag_parts = []
    prefixes = sorted({os.path.basename(p)[:-4] for s in systems for p in glob.glob(f"{res}/{s}/lag*.csv")
                       if not p.endswith(".pre.csv")})
    for prefix in prefixes:
        rate = prefix[len("lag-rate"):] if prefix.startswith("lag-rate") else None
        what = f"oltp_insert 16 threads at --rate={rate}" if rate else "oltp_insert 16 threads, unthrottled"
        llines = ["| system | replica | load TPS | trx behind p50 / p95 / max | ms behind p50 / p95 / max | "
                  "caught up after load end |",
                  "|---|---|---:|---:|---:|---:|"]
        tps_panel, lag_panel, trx_panel = {}, {}, {}
        for s in systems:
            path = f"{res}/{s}/{prefix}.csv"
            if not os.path.exists(path):
                continue
            load = parse_sysbench(f"{res}/{s}/{prefix}-load.txt")
            master, series = lag_series(path)
            # sysbench starts ~1 s after the sampler: put its per-second TPS on the sampler's clock, at the first
            # transaction the master's binlog shows
            start = next((t for t, m in master if m > master[0][1]), 1.0) if master else 1.0
            offset = start - 0.5
            tps_panel[s] = [(x + offset, y) for x, y in load.get("series", [])]
            end = offset + (load["series"][-1][0] if load.get("series") else 0)
            for name, pts in series.items():
                during = [p for p in pts if offset <= p[0] <= end]
                after = [p for p in pts if p[0] > end and p[1] == 0]
                caught = f"{(after[0][0] - end):.1f} s" if after else "not within the sampling window"
                if pts and pts[0][1] > 0 and not os.path.exists(f"{res}/{s}/{prefix}.pre.csv"):
                    caught += f" (already {pts[0][1]:,} behind when sampling began: backlog of earlier runs)"
                trx = [p[1] for p in during]
                ms = [p[2] for p in during]
                llines.append(f"| {s} | {name} | {fmt(load.get('tps'))} | {fmt(pct(trx, .5))} / {fmt(pct(trx, .95))} "
                              f"/ {fmt(max(trx) if trx else None)} | {fmt(pct(ms, .5))} / {fmt(pct(ms, .95))} / "
                              f"{fmt(max(ms) if ms else None)} | {caught} |")
                lag_panel[name] = [(t, m) for t, _, m in pts]
                trx_panel[name] = [(t, b) for t, b, _ in pts]
        if tps_panel:
            svg_plot(f"{res}/{prefix}.svg", f"{what}: master TPS and replica apply lag",
                     [("TPS (sysbench, 1 s)", tps_panel), ("ms behind", lag_panel),
                      ("transactions behind", trx_panel)])
            waits = []
            for s in systems:
                pre = f"{res}/{s}/{prefix}.pre.csv"
                if os.path.exists(pre):
                    rows = list(csv.DictReader(open(pre)))
                    if rows:
                        waits.append(f"{s} {float(rows[-1]['t']):.1f} s")
            note = (f" Before the run, the replicas first caught up with the backlog of the earlier runs "
                    f"(time taken: {'; '.join(waits)})." if waits else "")
            lag_parts.append(f"Replica apply lag, {what} (GTIDs sampled every 250 ms on replicas, 50 ms on the "
                             f"master; plot `{prefix}.svg`).{note}\n\n" + "\n".join(llines))
    lag = "\n\n".join(lag_parts) if lag_parts else "(no lag run)"

    loads = []
    for s in systems:
        try:
            b = open(f"{res}/{s}/loadavg-before").read().split()[0]
            a = open(f"{res}/{s}/loadavg-after").read().split()[0]
            loads.append(f"{s} {b} → {a}")
        except OSError:
            pass
    retries = []
    for s in systems:
        if os.path.exists(f"{res}/{s}/retries.txt"):
            retries += [f"{s}: {line.strip()}" for line in open(f"{res}/{s}/retries.txt") if line.strip()]
    settings = open(f"{res}/settings-check.txt").read().strip() if os.path.exists(f"{res}/settings-check.txt") else ""
    summary = (f"```\n{meta.strip()}\n```\n\nLoad average (1 min) before → after each system: {'; '.join(loads)}."
               f"\nSettings check: {settings or 'paxsql not run'}.\n"
               + ("Runs that failed once and were retried (the table shows the retry):\n"
                  + "\n".join(f"- {r}" for r in retries) + "\n" if retries else "")
               + f"\n{table}\n\nTargets (issue 6):\n"
               + ("\n".join(targets) or "- (oltp_insert 64 threads not run)") +
               f"\n\nProfile of oltp_insert 64 threads (deltas over the run; CPU in cores of {os.cpu_count()}):\n\n"
               f"{profile}\n\n{syscalls}\n\n{lag}\n")
    with open(f"{res}/summary.md", "w") as f:
        f.write(summary)
    print(summary)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("snap")
    s.add_argument("--procs", default="")
    s = sub.add_parser("lag")
    s.add_argument("--master", required=True)
    s.add_argument("--replicas", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--max-seconds", type=float, default=150)
    s.add_argument("--stop-file", required=True)
    s = sub.add_parser("report")
    s.add_argument("--results", required=True)
    a = ap.parse_args()
    {"snap": cmd_snap, "lag": cmd_lag, "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
