"""What `make test` costs the machine: the wall time and the peak resident memory of each part.

`make test` wraps each of its parts in ``footprint.py run PART -- COMMAND``, which runs the
command and records, in ``_build/footprint/PART.json``, its wall time and the largest resident
set of any one process of it (``getrusage(RUSAGE_CHILDREN).ru_maxrss``: the high-water mark of
the biggest process among the command and its descendants, not their sum). At the end
``footprint.py report`` prints one line per part and compares them with ``tests/footprint.json``:

- ``limits``: the promise of README and CONTRIBUTING, 4 GiB for any one process and 20 minutes
  for the whole of ``make test``; a process over the memory limit fails the run, with its
  numbers; a run over the time limit is reported (wall time is the machine's as much as ours);
- ``recorded``: the last measurement on the reference machine (two cores, 24 GB), each part's
  wall time and peak; a part more than 1.5 times its recorded peak is reported, not failed,
  since another machine measures other numbers.

Inside pytest, ``ATTNLIB_FOOTPRINT_DIR`` set makes tests/conftest.py record the peak resident
memory of each test file (Linux: the process's VmHWM, reset between files), so that a part's
peak can be traced to the file that made it (``footprint.py report --files``).

Usage:
    python tests/footprint.py start                    # the clock of the whole run
    python tests/footprint.py run PART -- COMMAND ...  # run one part, record it
    python tests/footprint.py report [--files] [--record]
    python tests/footprint.py workers GIB [--most N]   # pytest-xdist workers the memory holds
    python tests/footprint.py memory                   # for make doctor: is there enough?
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "_build" / "footprint"
RECORD = REPO / "tests" / "footprint.json"
GROWTH = 1.5  # a part this many times its recorded peak is reported


def _load_record() -> dict:
    return json.loads(RECORD.read_text())


def _max_rss_mib(usage: resource.struct_rusage) -> float:
    return usage.ru_maxrss / 1024  # kilobytes on Linux


def start() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.glob("*.json*"):
        old.unlink()
    (OUT / "start").write_text(str(time.time()))


def run(part: str, command: list[str]) -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    files = OUT / f"{part}.files.jsonl"
    env = dict(os.environ, ATTNLIB_FOOTPRINT_DIR=str(OUT), ATTNLIB_FOOTPRINT_PART=part)
    t0 = time.perf_counter()
    # close_fds=False: a make below keeps the jobserver pipe of the make above it.
    rc = subprocess.call(command, env=env, close_fds=False)
    wall = time.perf_counter() - t0
    peak = _max_rss_mib(resource.getrusage(resource.RUSAGE_CHILDREN))
    (OUT / f"{part}.json").write_text(json.dumps(
        {"part": part, "wall_s": round(wall, 1), "peak_rss_mib": round(peak),
         "rc": rc, "files": files.exists()}))
    return rc


def _parts() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(OUT.glob("*.json"))]


def _files(part: str) -> list[dict]:
    path = OUT / f"{part}.files.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    best: dict[str, dict] = {}
    for row in rows:  # a file split over workers: its largest worker
        if row["file"] not in best or row["peak_rss_mib"] > best[row["file"]]["peak_rss_mib"]:
            best[row["file"]] = row
    return sorted(best.values(), key=lambda r: -r["peak_rss_mib"])


def report(files: bool, record: bool) -> int:
    spec = _load_record()
    limit_mib, limit_s = spec["limits"]["process_mib"], spec["limits"]["total_s"]
    recorded = spec.get("recorded", {}).get("parts", {})
    parts = _parts()
    if not parts:
        print("footprint: nothing recorded in _build/footprint (run make test first)")
        return 1
    started = OUT / "start"
    total = time.time() - float(started.read_text()) if started.exists() else \
        sum(p["wall_s"] for p in parts)
    failures = []
    print(f"{'part':16s} {'wall':>8s} {'peak RSS':>10s}   recorded (wall, peak)")
    for p in parts:
        before = recorded.get(p["part"])
        was = f"{before['wall_s']:.0f} s, {before['peak_rss_mib']} MiB" if before else "-"
        print(f"{p['part']:16s} {p['wall_s']:7.0f}s {p['peak_rss_mib']:7d} MiB   {was}")
        if p["peak_rss_mib"] > limit_mib:
            failures.append(f"{p['part']}: one process reached {p['peak_rss_mib']} MiB, over "
                            f"the {limit_mib} MiB a process of make test may use")
        elif before and p["peak_rss_mib"] > GROWTH * before["peak_rss_mib"]:
            print(f"  note: {p['part']} peaked at {p['peak_rss_mib']} MiB, more than "
                  f"{GROWTH} x the {before['peak_rss_mib']} MiB recorded")
        if files:
            for row in _files(p["part"])[:5]:
                print(f"    {row['peak_rss_mib']:7d} MiB  {row['wall_s']:6.1f} s  {row['file']}")
    print(f"{'make test':16s} {total:7.0f}s   (limit {limit_s} s; recorded "
          f"{spec.get('recorded', {}).get('total_s', '-')} s)")
    if total > limit_s:
        # Wall time depends on the machine (its cores, its load): over the promise is said,
        # loudly, but only memory, which can stop a laptop, fails the run.
        print(f"  note: make test took {total:.0f} s, over the {limit_s} s README promises "
              f"on a two-core machine; see the parts above for where it went")
    if record:
        spec["recorded"] = {
            "machine": _machine(), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
            "total_s": round(total), "parts": {p["part"]: {"wall_s": p["wall_s"],
                                                           "peak_rss_mib": p["peak_rss_mib"]}
                                               for p in parts}}
        RECORD.write_text(json.dumps(spec, indent=2) + "\n")
        print(f"recorded in {RECORD.relative_to(REPO)}")
    for failure in failures:
        print(f"footprint: {failure}", file=sys.stderr)
    return 1 if failures else 0


def _meminfo(field: str) -> int | None:
    """A /proc/meminfo field in MiB (None off Linux)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) // 1024
    except OSError:
        return None
    return None


def _machine() -> str:
    total = _meminfo("MemTotal")
    memory = f", {total / 1024:.0f} GiB" if total else ""
    return f"{os.cpu_count()} CPUs{memory}"


def workers(gib_each: float, most: int | None = None) -> int:
    """As many workers as CPUs (or ``most``), and no more than the available memory holds at
    ``gib_each`` GiB a worker."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    most = most or cpus or 1
    available = _meminfo("MemAvailable")
    by_memory = most if available is None else int(available / 1024 // gib_each)
    return max(1, min(most, by_memory))


def memory() -> int:
    """make doctor: warn when the machine has less memory than make test needs."""
    need = _load_record()["limits"]["machine_mib"]
    total = _meminfo("MemTotal")
    if total is None:
        print("note     memory: unknown here (no /proc/meminfo); make test needs about "
              f"{need // 1024} GiB")
    elif total < need:
        print(f"warning  memory: {total / 1024:.1f} GiB; make test runs two parts at a time, "
              f"each process up to 4 GiB, and needs about {need // 1024} GiB. With less, run "
              "its parts one at a time: make test TEST_JOBS=1")
    else:
        print(f"ok       memory: {total / 1024:.1f} GiB (make test needs about "
              f"{need // 1024} GiB)")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"]:
        if len(argv) < 4 or argv[2] != "--":
            print("usage: footprint.py run PART -- COMMAND ...", file=sys.stderr)
            return 2
        return run(argv[1], argv[3:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("start")
    rep = sub.add_parser("report")
    rep.add_argument("--files", action="store_true", help="the largest test files of each part")
    rep.add_argument("--record", action="store_true", help="write the measurement to "
                     "tests/footprint.json")
    w = sub.add_parser("workers")
    w.add_argument("gib", type=float, help="GiB a worker may take")
    w.add_argument("--most", type=int, help="at most this many (default: the CPUs)")
    sub.add_parser("memory")
    args = parser.parse_args(argv)
    if args.what == "start":
        start()
        return 0
    if args.what == "report":
        return report(args.files, args.record)
    if args.what == "workers":
        print(workers(args.gib, args.most))
        return 0
    return memory()


if __name__ == "__main__":
    sys.exit(main())
