"""tests/footprint.py, which measures what `make test` costs: its limits and its arithmetic."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "footprint", Path(__file__).resolve().parent / "footprint.py")
footprint = importlib.util.module_from_spec(_SPEC)
sys.modules["footprint"] = footprint
_SPEC.loader.exec_module(footprint)


@pytest.fixture
def out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """footprint.py writing to a folder of its own, with a record of its own."""
    monkeypatch.setattr(footprint, "OUT", tmp_path / "footprint")
    record = tmp_path / "footprint.json"
    record.write_text(json.dumps({"limits": {"process_mib": 4096, "total_s": 900,
                                             "machine_mib": 8192}}))
    monkeypatch.setattr(footprint, "RECORD", record)
    monkeypatch.setattr(footprint, "REPO", tmp_path)
    return footprint.OUT


def _part(out: Path, name: str, peak: int, wall: float = 10.0) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(
        {"part": name, "wall_s": wall, "peak_rss_mib": peak, "rc": 0, "files": False}))


def test_run_records_the_peak_of_the_largest_child(out: Path) -> None:
    """A child that holds 300 MiB is recorded at 300 MiB or more, and its exit status kept.

    run() reads the peak of its process's waited-for children, so it runs in a fresh Python
    here: inside pytest, the children of earlier tests would count too.
    """
    code = "b = bytearray(300 * 2**20); b[::4096] = b'x' * len(b[::4096]); raise SystemExit(3)"
    driver = (
        "import importlib.util, sys; from pathlib import Path\n"
        f"spec = importlib.util.spec_from_file_location('footprint', {str(_SPEC.origin)!r})\n"
        "fp = importlib.util.module_from_spec(spec); spec.loader.exec_module(fp)\n"
        f"fp.OUT = Path({str(out)!r})\n"
        f"sys.exit(fp.run('probe', [sys.executable, '-c', {code!r}]))\n"
    )
    rc = subprocess.call([sys.executable, "-c", driver])
    row = json.loads((out / "probe.json").read_text())
    assert rc == 3 and row["rc"] == 3
    assert 300 <= row["peak_rss_mib"] < 1024, row


def test_report_fails_on_memory_and_says_time(out: Path, capsys: pytest.CaptureFixture) -> None:
    """Memory over the limit fails the report and names the part; time over it is a note."""
    footprint.start()
    # make test started 1000 s ago: over the 900 s limit.
    (out / "start").write_text(str(time.time() - 1000))
    _part(out, "test-lib", 900, wall=1000.0)
    assert footprint.report(files=False, record=False) == 0
    assert "note: make test took" in capsys.readouterr().out
    _part(out, "test-nbval", 5000)
    assert footprint.report(files=False, record=False) == 1
    err = capsys.readouterr().err
    assert "test-nbval: one process reached 5000 MiB, over the 4096 MiB" in err
    assert "test-lib" not in err


def test_report_notes_growth_over_the_record(out: Path, capsys: pytest.CaptureFixture) -> None:
    """--record writes the parts; a later part more than 1.5 times its record is noted."""
    footprint.start()
    _part(out, "test-lib", 1000)
    assert footprint.report(files=False, record=True) == 0
    recorded = json.loads(footprint.RECORD.read_text())["recorded"]
    assert recorded["parts"]["test-lib"]["peak_rss_mib"] == 1000
    capsys.readouterr()
    _part(out, "test-lib", 1600)
    assert footprint.report(files=False, record=False) == 0
    assert "more than 1.5 x the 1000 MiB recorded" in capsys.readouterr().out


def test_files_keep_each_files_largest_peak(out: Path) -> None:
    """Two workers' rows for one file keep the larger; files are listed largest first."""
    out.mkdir(parents=True)
    rows = [{"file": "a.py", "peak_rss_mib": 100, "wall_s": 1.0},
            {"file": "b.py", "peak_rss_mib": 700, "wall_s": 2.0},
            {"file": "a.py", "peak_rss_mib": 300, "wall_s": 1.5}]
    (out / "p.files.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [(r["file"], r["peak_rss_mib"]) for r in footprint._files("p")] == \
        [("b.py", 700), ("a.py", 300)]


@pytest.mark.parametrize("available, gib, most, expected", [
    (64 * 1024, 2, 2, 2),      # memory enough: the CPUs decide
    (3 * 1024, 2, 2, 1),       # 3 GiB holds one 2 GiB worker
    (1024, 2, 2, 1),           # never fewer than one
    (64 * 1024, 1.5, 3, 3),    # --most caps it
    (None, 2, 2, 2),           # no /proc/meminfo: the CPUs decide
])
def test_workers_fit_the_memory(monkeypatch: pytest.MonkeyPatch, available, gib, most,
                                expected) -> None:
    monkeypatch.setattr(footprint, "_meminfo", lambda field: available)
    assert footprint.workers(gib, most) == expected
