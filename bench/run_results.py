"""What bench/run.py makes of runs: the programs' key=value metrics, each
run's status, medians and spans per workload and contender, and the
formatting every table shares. Standard library only."""

from __future__ import annotations

import math
import signal
import re
import statistics

OK = "ok"
EXIT_MISMATCH = 86
EXIT_SELF_CHECK = 3
KV_LINE = re.compile(r"^([a-z][a-z0-9_]*)=(.*)$")

def parse_metrics(stdout: str, output: str) -> dict:
    metrics: dict = {}
    if output == "ruby":
        lines = [ln for ln in stdout.strip().splitlines() if "," in ln]
        if lines:
            rss, dur = lines[-1].split(",", 1)
            try:
                metrics = {"rss_kb": float(rss), "duration_s": float(dur)}
            except ValueError:
                pass
        return metrics
    for line in stdout.splitlines():
        m = KV_LINE.match(line.strip())
        if not m:
            continue
        key, value = m.groups()
        try:
            metrics[key] = float(value)
        except ValueError:
            metrics[key] = value
    return metrics


def classify(res: dict) -> str:
    if res["timed_out"]:
        return "timeout"
    code = res["exit"]
    if code is None:
        return f"error (launcher exit {res['launcher_exit']})"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"crash ({name})"
    if code == EXIT_MISMATCH:
        return "mismatch"
    if code == EXIT_SELF_CHECK:
        return "failed self-check"
    if code != 0:
        return f"error (exit {code})"
    return OK


# --------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------

def geomean(values: list[float]) -> float | None:
    vals = [v for v in values if v is not None and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def fmt_time(s: float | None) -> str:
    """Seconds, three significant digits."""
    if s is None:
        return "-"
    for limit, fmt in ((100, "{:.0f}"), (10, "{:.1f}"), (1, "{:.2f}"), (0.1, "{:.3f}"), (0.01, "{:.4f}")):
        if s >= limit:
            return fmt.format(s)
    return f"{s:.2e}"


def fmt_mib(kb: float | None) -> str:
    if kb is None:
        return "-"
    mib = kb / 1024
    return f"{mib:.0f}" if mib >= 100 else f"{mib:.1f}"


def fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}"


def fmt_num(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    a = abs(v)
    if a >= 1e7:
        return f"{v:.3g}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def fmt_hms(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class Cell:
    """All runs of one workload under one contender."""

    def __init__(self, runs: list[dict]):
        self.runs = runs
        self.ok_runs = [r for r in runs if r["status"] == OK]
        failed = [r for r in runs if r["status"] != OK]
        if not runs:
            self.status = "not run"
        elif not failed:
            self.status = OK
        elif len(failed) == len(runs):
            self.status = failed[0]["status"]
        else:
            self.status = f"{failed[0]['status']} {len(failed)}/{len(runs)}"
        self.ok = self.status == OK

    def _series(self, key: str) -> list[float]:
        vals = []
        for r in self.ok_runs:
            v = r.get(key) if key in ("time_s", "wall_s", "user_s", "sys_s", "maxrss_kb") else r["metrics"].get(key)
            if isinstance(v, (int, float)):
                vals.append(float(v))
        return vals

    def median(self, key: str) -> float | None:
        vals = self._series(key)
        return statistics.median(vals) if vals else None

    def span(self, key: str) -> tuple[float, float] | None:
        vals = self._series(key)
        return (min(vals), max(vals)) if vals else None
