"""The benchmark script runs end to end at tiny sizes and its correctness checks hold.

Only correctness is asserted (identical tokens, agreeing outputs, every row printed);
timings from a smoke run on a shared machine mean nothing and are not checked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "run.py"


def test_quick_benchmark_run(tmp_path, device):
    out = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--device", str(device), "--out", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(out.read_text())
    assert results["quick"] is True and results["device"] == str(device)
    assert results["checks_passed"] is True
    assert results["targets"] == {}  # targets are judged on full sizes only

    assert [r["N"] for r in results["attention"]] == [64, 128]
    for r in results["attention"]:
        assert r["outputs_agree"] and r["max_abs_diff"] <= 1e-4
        assert set(r["seconds"]) == {"sdpa", "auto", "explicit"}
        assert all(t > 0 for t in r["seconds"].values())

    assert [r["new_tokens"] for r in results["decode"]] == [8, 16]
    assert all(r["tokens_identical"] for r in results["decode"])

    prof = results["profile"]
    assert prof["tokens_identical"]
    assert prof["context_first"] == [9, 16] and prof["context_last"] == [24, 31]
    for path in ("cache", "no_cache"):
        assert set(prof[path]) == {"first", "last", "last_over_first"}

    hf = results["hf"]
    assert hf["new_tokens"] == 16 and hf["tokens_identical"]
    assert set(hf["seconds_per_token"]) == {"attnlib", "hf_loop", "hf_generate"}

    mem = results["memory"]
    assert mem["outputs_agree"] and mem["max_abs_diff"] <= 1e-4
    assert mem["extra_bytes"]["explicit"] > 0 and mem["extra_bytes"]["tiled"] >= 0

    # one table on stdout with a row per measurement
    lines = done.stdout.splitlines()
    assert any(line.startswith("benchmark") for line in lines)
    rows = {
        "attention auto / SDPA": 2, "attention explicit / SDPA": 2,
        "decode: cache vs none": 2, "decode: cached step, late / early": 1,
        "decode: attnlib / HF loop": 1, "decode: attnlib / HF generate": 1,
        "memory: tiled vs explicit": 1,
    }
    for label, count in rows.items():
        assert sum(line.startswith(label) for line in lines) == count, label
    assert not any("TOKENS DIFFER" in line or "MISSED" in line for line in lines)
