"""The report of a bench/run.py run: the charts (gnuplot), report.md and the
summary printed at the end. A mixin of run.py's Runner, whose results and
settings it reads. Standard library only."""

from __future__ import annotations

import os
import shutil
import subprocess

import statistics

import fastpath_ir
from launcher import TIMELINE_INTERVAL_S
from run_results import OK, fmt_mib, fmt_num, fmt_ratio, fmt_time, geomean

TERM = "set terminal pngcairo size {w},{h} font 'sans,10'"  # gnuplot's, for every chart


def _geomean_ratios(an: dict, a: str, ref: str) -> tuple[float | None, float | None]:
    """Contender `a`'s geometric-mean time and peak RSS over `ref`'s (None
    where either is missing)."""
    g, gr = an["geomean"][a], an["geomean"].get(ref, {})
    t = g["time"] / gr["time"] if g["time"] and gr.get("time") else None
    m = g["rss"] / gr["rss"] if g["rss"] and gr.get("rss") else None
    return t, m


class ReportWriter:
    """Charts and Markdown for Runner (run.py)."""

    def draw_charts(self, an: dict) -> dict[str, str]:
        """Draws the charts with gnuplot; returns {chart: file name}."""
        charts = self.draw_timelines()
        if shutil.which("gnuplot") is None:
            return charts
        ref = an["ref"]
        avail = an["available"]
        # Geometric means (one bar per contender).
        for key, label, fname in (("time", "time", "geomean_time"), ("rss", "peak RSS", "geomean_rss")):
            rows = [(a, an["geomean"][a][key] / an["geomean"][ref][key])
                    for a in avail if an["geomean"][a][key] and ref and an["geomean"][ref][key]]
            if not rows:
                continue
            dat = os.path.join(self.out_dir, f"{fname}.dat")
            with open(dat, "w") as f:
                for a, r in rows:
                    f.write(f'"{a}" {r:.6f}\n')
            gp = os.path.join(self.out_dir, f"{fname}.gp")
            with open(gp, "w") as f:
                f.write("\n".join([
                    TERM.format(w=800, h=450),
                    f"set output '{fname}.png'",
                    f"set title 'Geometric mean of {label} over {len(an['complete'])} workloads, relative to {ref} (lower is better)'",
                    "set style fill solid 0.8 border -1", "set boxwidth 0.6", "set grid ytics",
                    "set yrange [0:*]", "unset key", f"set ylabel '{label} / {ref}'",
                    "set arrow from graph 0, first 1 to graph 1, first 1 nohead dt 2 lc rgb 'black'",
                    f"plot '{fname}.dat' using 0:2:xtic(1) with boxes lc rgb '#4477aa', "
                    "'' using 0:2:(sprintf('%.2f', $2)) with labels offset 0,0.8 notitle",
                    "",
                ]))
            if self._gnuplot(gp):
                charts[fname] = f"{fname}.png"
        # Per-workload grouped bars (ratio to the reference, log scale).
        names = [n for n in an["table"] if ref in an["table"][n]["times"]]
        for key, label, fname in (("times", "time", "workloads_time"), ("rss", "peak RSS", "workloads_rss")):
            if not names or not ref:
                continue
            dat = os.path.join(self.out_dir, f"{fname}.dat")
            with open(dat, "w") as f:
                f.write("workload " + " ".join(avail) + "\n")
                for n in names:
                    vals = an["table"][n][key]
                    base = vals[ref]
                    cells = [f"{vals[a] / base:.6f}" if a in vals and base else "NaN" for a in avail]
                    f.write(f'"{n}" ' + " ".join(cells) + "\n")
            gp = os.path.join(self.out_dir, f"{fname}.gp")
            plots = ", ".join(
                (f"'{fname}.dat' using {i + 2}:xtic(1) title '{a}'" if i == 0 else f"'' using {i + 2} title '{a}'")
                for i, a in enumerate(avail))
            with open(gp, "w") as f:
                f.write("\n".join([
                    TERM.format(w=max(900, min(2400, 8 * len(names) * (len(avail) + 1) + 200)), h=560),
                    f"set output '{fname}.png'",
                    f"set title 'Median {label} per workload relative to {ref} (log scale, lower is better)'",
                    "set style data histograms", "set style histogram clustered gap 1",
                    "set style fill solid 0.85 border -1", "set logscale y", "set grid ytics",
                    "set xtics rotate by -40 left", "set key outside right top", "set bmargin 8",
                    "set datafile missing 'NaN'", f"set ylabel '{label} / {ref}'",
                    "set arrow from graph 0, first 1 to graph 1, first 1 nohead dt 2 lc rgb 'black'",
                    f"plot {plots}", "",
                ]))
            if self._gnuplot(gp):
                charts[fname] = f"{fname}.png"
        return charts

    def draw_timelines(self) -> dict[str, str]:
        """Writes timeline-<workload>.dat (a block per contender: seconds,
        RSS MiB) and, with gnuplot, draws it: {"timeline-<workload>": png}."""
        charts = {}
        for name, per in self.timelines.items():
            fname = f"timeline-{name}"
            order = [a for a in self.contenders_names() if a in per]
            with open(os.path.join(self.out_dir, f"{fname}.dat"), "w") as f:
                f.write(f"# RSS of {name} over time, first run of each contender: seconds since start, MiB\n")
                for a in order:
                    f.write(f"# {a}\n" + "".join(f"{t:.3f} {kib / 1024:.1f}\n" for t, kib in per[a]) + "\n\n")
            if shutil.which("gnuplot") is None:
                continue
            plots = ", ".join(f"'{fname}.dat' index {i} using 1:2 with lines lw 2 title '{a}'"
                              for i, a in enumerate(order))
            gp = os.path.join(self.out_dir, f"{fname}.gp")
            with open(gp, "w") as f:
                f.write("\n".join([
                    TERM.format(w=900, h=500),
                    f"set output '{fname}.png'",
                    f"set title 'RSS over time: {name} ({self.mode} mode, first run of each contender, "
                    f"sampled every {TIMELINE_INTERVAL_S * 1000:.0f} ms)'",
                    "set xlabel 'seconds since start'", "set ylabel 'RSS (MiB)'", "set grid",
                    "set xrange [0:*]", "set yrange [0:*]", "set key outside right top",
                    f"plot {plots}", "",
                ]))
            if self._gnuplot(gp):
                charts[fname] = f"{fname}.png"
        return charts

    def _gnuplot(self, script: str) -> bool:
        try:
            p = subprocess.run(["gnuplot", os.path.basename(script)], cwd=self.out_dir, capture_output=True,
                               text=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as e:
            self.progress(f"gnuplot failed on {script}: {e}")
            return False
        if p.returncode != 0:
            self.progress(f"gnuplot failed on {script}: {p.stderr.strip()[:300]}")
            return False
        return True

    # ---- Markdown report -----------------------------------------------------------------

    def report_markdown(self, an: dict, charts: dict[str, str]) -> str:
        env = getattr(self, "env_info", None) or self.environment()
        ref = an["ref"]
        avail = an["available"]
        names = self.contenders_names()
        L: list[str] = []
        L.append(f"# xalloc benchmark report ({self.mode} mode)")
        L.append("")
        L.append(f"{env['date']} - {env['cpu']}, {env['cpus']} CPUs, {env['memory']}, Linux {env['kernel']}, "
                 f"{env['glibc']}, THP `{env['thp']}`, repository {env['git']}.")
        L.append(f"{self.reps} run(s) per workload and contender, interleaved (each round starts one contender further along); per-run timeout "
                 f"{self.timeout:.0f} s; N = {self.ncpu} threads where a workload says N.")
        L.append("")
        L.append("| contender | preloaded library | version |")
        L.append("|---|---|---|")
        for c in self.contenders:
            lib = self.libs[c.name]
            L.append(f"| {c.name} | {'(none: glibc malloc)' if lib == '' else lib or '**missing**'} | "
                     f"{env['package_versions'].get(c.name, '') or ('-' if c.name != 'xalloc' else 'this tree')} |")
        if env["tuning_env"]:
            L.append("")
            L.append("Allocator tuning variables were set for this run: " +
                     ", ".join(f"`{k}={v}`" for k, v in sorted(env["tuning_env"].items())) + ".")
        L.append("")
        L.append("Time is the median wall time of the whole process unless the workload names another "
                 "measure (the time column says which); peak RSS is the program's maximum resident set "
                 "(wait4 in bench/common/launch.c). Ratios: to the reference contender and to the best of the row; lower is better. "
                 "A contender that crashed, timed out or ran under the wrong allocator is shown with that "
                 "status and left out of the geometric means.")
        L.append("")

        # Summary.
        L.append("## Summary")
        L.append("")
        if ref != "xalloc":
            if "xalloc" not in self.libs:
                why = "not selected"
            elif self.libs["xalloc"] is None:
                why = f"{self.build_dir}/libxalloc.so is not built"
            else:
                why = "no successful runs"
            L.append(f"**xalloc has no results in this run ({why}); ratios are relative to {ref}.**")
            L.append("")
        L.append(f"Geometric means over the {len(an['complete'])} workloads that every available contender "
                 f"completed, relative to {ref}; `pairwise` columns compare each contender with {ref} over every "
                 "workload both completed.")
        L.append("")
        L.append(f"| contender | time (geomean, / {ref}) | peak RSS (geomean, / {ref}) | time pairwise | RSS pairwise | "
                 "workloads won (time) | won (RSS) | failed |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        for a in names:
            if a not in avail:
                L.append(f"| {a} | missing | missing | - | - | - | - | - |")
                continue
            t, m = _geomean_ratios(an, a, ref)
            p = an["pairwise"][a]
            L.append(f"| {a} | {fmt_ratio(t)} | {fmt_ratio(m)} | {fmt_ratio(p['time'])} ({p['n']}) | "
                     f"{fmt_ratio(p['rss'])} | {an['wins_time'][a]} | {an['wins_rss'][a]} | "
                     f"{len(an['failures'][a])} |")
        L.append("")
        for key in ("geomean_time", "geomean_rss"):
            if key in charts:
                L.append(f"![{key}]({charts[key]})")
        if charts:
            L.append("")
        excluded = [n for n in an["table"] if n not in an["complete"]]
        if excluded:
            L.append("Workloads left out of the common geometric mean (some contender did not complete them): " +
                     ", ".join(excluded) + ".")
            L.append("")
        fails = [(a, n, s) for a in names for (n, s) in an["failures"][a] if s != "missing"]
        if fails:
            L.append("### Failures")
            L.append("")
            L.append("| workload | contender | status | last line of stderr |")
            L.append("|---|---|---|---|")
            for a, n, s in fails:
                detail = next((r.get("detail", "") for r in self.runs
                               if r["workload"] == n and r["contender"] == a and r["status"] != OK), "")
                L.append(f"| {n} | {a} | {s} | {detail.replace('|', '/')} |")
            L.append("")

        L.append("### Winners per workload")
        L.append("")
        L.append("| workload | fastest | smallest peak RSS |")
        L.append("|---|---|---|")
        for n, row in an["table"].items():
            L.append(f"| {n} | {row['time_winner'] or '-'} | {row['rss_winner'] or '-'} |")
        L.append("")

        deg = self.degradation(an["table"])
        if deg:
            L.append("### Parallelism degradation (seed 000)")
            L.append("")
            L.append("time(n8) / time(n4) / (size(n8) / size(n4)) of the realworld workload, from the median "
                     "task-phase time (`process_s`) and the input size (`bytes`); near 1.00 is ideal, above 1 "
                     "means the allocator slows down with more parallel workers.")
            L.append("")
            L.append("| contender | degradation |")
            L.append("|---|---:|")
            for a in names:
                L.append(f"| {a} | {fmt_ratio(deg.get(a)) if a in avail else 'missing'} |")
            L.append("")

        for key in ("workloads_time", "workloads_rss"):
            if key in charts:
                L.append(f"![{key}]({charts[key]})")
                L.append("")

        # Per-workload tables.
        L.append("## Workloads")
        L.append("")
        for w in self.workloads:
            if w.name not in an["table"]:
                continue
            row = an["table"][w.name]
            cmd = self.command(w)
            L.append(f"### {w.name}")
            L.append("")
            L.append(f"{w.what}. Models: {w.origin}. Command: `{' '.join(os.path.basename(x) if i == 0 else x for i, x in enumerate(cmd)) if isinstance(cmd, list) else cmd}`"
                     + (f" with {', '.join(f'{k}={v}' for k, v in w.env.items())}" if w.env else "") + ".")
            L.append("")
            tname = f"time ({w.time_key})" if w.time_key else "time (wall)"
            shown = tuple(w.metrics) + ("minor_faults",)
            head = (f"| contender | status | {tname} s | min-max | / {ref} | / best | peak RSS MiB | min-max | "
                    f"/ {ref} | / best |" + "".join(f" {m} |" for m in shown))
            L.append(head)
            L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(shown))
            rt = row["times"].get(ref)
            rm = row["rss"].get(ref)
            for a in names:
                cell = row["cells"][a]
                if not cell.ok:
                    L.append(f"| {a} | **{cell.status}** |" + " - |" * (8 + len(shown)))
                    continue
                t, m = cell.median("time_s"), cell.median("maxrss_kb")
                ts, ms = cell.span("time_s"), cell.span("maxrss_kb")
                best_t = " **1.00**" if row["time_winner"] == a else f" {fmt_ratio(t / row['best_time'])}"
                best_m = " **1.00**" if row["rss_winner"] == a else f" {fmt_ratio(m / row['best_rss'])}"
                L.append(f"| {a} | ok | {fmt_time(t)} | {fmt_time(ts[0])}-{fmt_time(ts[1])} | "
                         f"{fmt_ratio(t / rt) if rt else '-'} |{best_t} | {fmt_mib(m)} | "
                         f"{fmt_mib(ms[0])}-{fmt_mib(ms[1])} | {fmt_ratio(m / rm) if rm else '-'} |{best_m} |"
                         + "".join(f" {fmt_num(cell.median(k))} |" for k in shown))
            L.append("")
            if f"timeline-{w.name}" in charts:
                L.append(f"RSS over time, sampled every {TIMELINE_INTERVAL_S * 1000:.0f} ms during the first run "
                         f"of each contender (data: `timeline-{w.name}.dat`):")
                L.append("")
                L.append(f"![RSS over time: {w.name}](timeline-{w.name}.png)")
                L.append("")

        # Microbenchmarks.
        if self.micro:
            L.append("## Microbenchmarks (Google Benchmark)")
            L.append("")
            if "error" in self.micro:
                L.append(f"Not run: {self.micro['error']}.")
            else:
                L.append(f"Median ns per operation (per item for batch benchmarks) over {self.reps} run(s), "
                         f"--benchmark_min_time={self.micro['min_time']}. Not part of the geometric means above.")
                L.append("")
                cols = [a for a in names if a in avail and self.micro["status"].get(a) is None]
                L.append("| benchmark | " + " | ".join(cols) + " |")
                L.append("|---|" + "---:|" * len(cols))
                per = {a: [] for a in cols}
                for bname, vals in self.micro["ns"].items():
                    med = {a: statistics.median(vals[a]) for a in cols if vals.get(a)}
                    best = min(med.values()) if med else None
                    cells = []
                    for a in cols:
                        v = med.get(a)
                        cells.append("-" if v is None else (f"**{v:.1f}**" if v == best else f"{v:.1f}"))
                    L.append(f"| {bname} | " + " | ".join(cells) + " |")
                    if ref in med:
                        for a in cols:
                            if a in med:
                                per[a].append(med[a] / med[ref])
                if ref in cols:
                    L.append(f"| *geomean / {ref}* | " + " | ".join(fmt_ratio(geomean(per[a])) for a in cols) + " |")
                bad = {a: s for a, s in self.micro["status"].items()}
                if bad:
                    L.append("")
                    L.append("Not measured: " + ", ".join(f"{a} ({s})" for a, s in bad.items()) + ".")
            L.append("")

        if self.fastpath is not None:
            L.append("## Fast-path instruction counts (callgrind)")
            L.append("")
            L.append(fastpath_ir.markdown(self.fastpath))
            if any(isinstance(v, str) and "crash" in v for row in self.fastpath.get("results", {}).values()
                   for v in row.values()):
                L.append("A crash here can be valgrind's, not the allocator's: scudo, for one, aborts with "
                         "\"internal map or unmap failure\" because valgrind refuses its large address-space "
                         "reservation.")
                L.append("")
        return "\n".join(L) + "\n"

    def summary_text(self, an: dict) -> str:
        ref = an["ref"]
        avail = an["available"]
        out = [f"Summary ({self.mode}, {self.reps} run(s); geometric means over {len(an['complete'])} workloads "
               f"all contenders completed, relative to {ref}; lower is better)", ""]
        out.append(f"  {'contender':10s} {'time':>7s} {'RSS':>7s}   {'time/RSS pairwise (n)':>22s}   wins t/m  failed")
        for a in self.contenders_names():
            if a not in avail:
                out.append(f"  {a:10s} {'missing':>7s}")
                continue
            t, m = _geomean_ratios(an, a, ref)
            p = an["pairwise"][a]
            pw = f"{fmt_ratio(p['time'])}/{fmt_ratio(p['rss'])} ({p['n']})"
            out.append(f"  {a:10s} {fmt_ratio(t):>7s} {fmt_ratio(m):>7s}   {pw:>22s}   "
                       f"{an['wins_time'][a]:4d}/{an['wins_rss'][a]:<4d} {len(an['failures'][a]):4d}")
        out.append("")
        out.append("  Winners per workload (fastest / smallest peak RSS):")
        for n, row in an["table"].items():
            out.append(f"    {n:20s} {row['time_winner'] or '-':10s} {row['rss_winner'] or '-'}")
        fails = [(a, n, s) for a in self.contenders_names() for (n, s) in an["failures"][a] if s != "missing"]
        if fails:
            out.append("")
            out.append("  Failures:")
            for a, n, s in fails:
                out.append(f"    {n:20s} {a:10s} {s}")
        deg = self.degradation(an["table"])
        if deg:
            out.append("")
            out.append("  Degradation time(n8)/time(n4)/(size ratio): " +
                       ", ".join(f"{a} {fmt_ratio(v)}" for a, v in deg.items() if a in avail))
        return "\n".join(out) + "\n"
