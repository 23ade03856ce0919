"""The benchmark script runs end to end at tiny sizes and its correctness checks hold; its
results follow the schema that the book's performance page reads (benchmarks/report.py).

Only correctness is asserted (identical tokens, agreeing outputs, every row printed);
timings from a smoke run on a shared machine mean nothing and are not checked. The rows and
the schema are checked on a fixed sample, tests/benchmark_results_sample.json, and on the
committed results in benchmarks/results/.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPT = BENCHMARKS / "run.py"
SAMPLE = Path(__file__).resolve().parent / "benchmark_results_sample.json"


@pytest.fixture(scope="module")
def report() -> ModuleType:
    """benchmarks/report.py, imported from its path as the book build imports it."""
    spec = importlib.util.spec_from_file_location("benchmarks_report", BENCHMARKS / "report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def sample() -> dict:
    """A full-size CPU results file with round numbers; one target missed."""
    return json.loads(SAMPLE.read_text(encoding="utf-8"))


# The quick run takes about 30 s on one CPU of a quiet two-core machine; a run still going after
# 20 times that has hung, and the test says which part it was in.
QUICK_RUN_TIMEOUT_S = 600


def run_reporting_hangs(command: list[str], timeout: float) -> subprocess.CompletedProcess:
    """``subprocess.run(command)``; past ``timeout`` seconds, fail with the last lines it wrote
    (run.py names each part on stderr as it starts it)."""
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired as hung:
        said = hung.stderr or b""
        said = said.decode(errors="replace") if isinstance(said, bytes) else said
        last = "\n".join(said.splitlines()[-5:])
        pytest.fail(f"{' '.join(command[1:])} still running after {timeout:.0f} s, 20 times "
                    f"its usual time; stopped. Its last lines:\n{last}")


@pytest.mark.slow
def test_quick_benchmark_run(tmp_path, device, report):
    out = tmp_path / "results.json"
    done = run_reporting_hangs(
        [sys.executable, str(SCRIPT), "--quick", "--device", str(device), "--out", str(out)],
        QUICK_RUN_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    results = json.loads(out.read_text())
    assert results["quick"] is True and results["device"] == str(device)
    assert report.problems(results) == []
    assert results["threads"] >= 1 and results["machine"]["logical_cpus"] >= 1
    assert results["machine"]["cpu"] and results["machine"]["os"]
    assert (results["machine"]["gpu"] is None) == (device.type != "cuda")
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
    assert set(hf["seconds_per_token"]) == {"attnlib", "hf_loop", "hf_generate", "eager"}
    per = hf["seconds_per_token"]
    assert hf["attnlib_over_eager"] == per["attnlib"] / per["eager"]
    assert hf["eager_over_hf_loop"] == per["eager"] / per["hf_loop"]

    mem = results["memory"]
    assert mem["outputs_agree"] and mem["max_abs_diff"] <= 1e-4
    assert mem["extra_bytes"]["explicit"] > 0 and mem["extra_bytes"]["tiled"] >= 0

    assert [(r["G"], r["N"]) for r in results["step"]] == [(32, 64), (8, 64), (1, 64)]
    for r in results["step"]:  # what a step copies does not grow with the tokens held
        assert r["outputs_agree"] and r["bytes_copied"] == r["bytes_copied_half"] > 0
        assert r["bytes_copied"] >= r["row_bytes"] == 2 * r["G"] * 64 * 4  # the new row
    mla = results["mla"]
    assert mla["outputs_agree"] and mla["max_abs_diff"] <= 1e-4 and mla["N"] == 64
    assert mla["cache_bytes"] == {"latent": 64 * 256 * 4, "expanded": 64 * 2 * 32 * 64 * 4}

    serving = results["serving"]
    paged = serving["paged"]
    assert paged["tokens_identical"] and paged["new_tokens"] == 8
    assert paged["ratio_range"][0] <= paged["paged_over_contiguous"] <= paged["ratio_range"][1]
    step = paged["step_bytes"]  # a paged decoding step allocates nothing that grows with N
    assert step["held"] == [20, 40] and step["paged"][0] == step["paged"][1] > 0
    assert step["largest"]["scattered"][0] == step["largest"]["scattered"][1]
    batch = serving["batching"]
    assert batch["outputs_identical"] and batch["requests"] == 4
    assert batch["counts"]["continuous"]["tokens"] == batch["counts"]["static"]["tokens"] > 0
    budget = batch["budget"]
    assert budget["n_blocks"] == 6 and budget["reserved"]["preemptions"] == 0
    assert budget["on_demand"]["outputs_identical"] and budget["reserved"]["outputs_identical"]
    assert [r["k"] for r in serving["speculative"]] == [2, 4, 8]
    for r in serving["speculative"]:  # at most one target pass per token, at least 1/(k+1)
        assert r["tokens_identical"] and 0 <= r["acceptance_rate"] <= 1
        assert 1 / (r["k"] + 1) <= r["target_passes_per_token"] <= 1
    quant = serving["quantised"]
    assert quant[0]["setting"] == "float32" and quant[0]["loss_minus_float"] == 0
    assert all(r["cache_bytes"] < quant[0]["cache_bytes"] for r in quant[1:])
    hf_quant = serving["hf_quantised"]  # Hugging Face's float decoding gives attnlib's loss
    assert hf_quant["float_agrees"] and abs(hf_quant["float_loss"] - quant[0]["loss"]) <= 1e-4
    assert [(r["nbits"], r["axis_key"]) for r in hf_quant["rows"]] == [(4, 0), (2, 0)]

    # one table on stdout with a row per measurement
    lines = done.stdout.splitlines()
    assert any(line.startswith("benchmark") for line in lines)
    rows = {
        "attention auto / SDPA": 2, "attention explicit / SDPA": 2,
        "decode: cache vs none": 2, "decode: cached step, late / early": 1,
        "decode: attnlib / HF loop": 1, "decode: attnlib / HF generate": 1,
        "decode: attnlib / eager PyTorch": 1,
        "memory: tiled vs explicit": 1, "decode step: GQA / SDPA": 3,
        "decode step: bytes copied, N / N/2": 3, "MLA step: absorbed auto / explicit": 1,
        "MLA step: rebuilt / absorbed": 1, "MLA step: expanded / absorbed": 1,
        "serving: paged / contiguous cache": 1,
        "serving: paged, scattered blocks / contiguous": 1,
        "serving: paged step, bytes allocated N / N/2": 1,
        "serving: continuous / static batching": 1, "serving: blocks on demand / reserved": 1,
        "serving: speculative / plain greedy": 3, "serving: quantised / float cache": 4,
        "serving: HF QuantizedCache (quanto)": 2,
    }
    for label, count in rows.items():
        assert sum(line.startswith(label) for line in lines) == count, label
    assert not any("TOKENS DIFFER" in line or "MISSED" in line for line in lines)
    # the printed rows are report.rows, cell for cell (the performance page uses the same)
    for row in report.rows(results):
        assert any(line.split() == " ".join(row).split() for line in lines), row
    assert report.machine_line(results) in lines


@pytest.mark.slow
def test_save_refuses_quick_sizes():
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--save"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and "--save records a measurement" in done.stderr


def test_save_path_is_the_committed_file(report):
    assert report.results_path("cpu") == BENCHMARKS / "results" / "cpu.json"
    assert report.results_path("cuda") == BENCHMARKS / "results" / "cuda.json"


def test_rows_from_a_sample(report, sample):
    rows = report.rows(sample)
    assert report.HEADER == ("benchmark", "case", "attnlib", "baseline", "ratio", "target",
                             "check")
    assert all(len(row) == len(report.HEADER) for row in rows)
    assert [row[:2] for row in rows] == [
        ("attention auto / SDPA", "N=1024"), ("attention explicit / SDPA", "N=1024"),
        ("attention auto / SDPA", "N=2048"), ("attention explicit / SDPA", "N=2048"),
        ("decode: cache vs none", "256 new"), ("decode: cache vs none", "1024 new"),
        ("decode: cached step, late / early", "1024 new"),
        ("decode: attnlib / HF loop", "512 new"), ("decode: attnlib / HF generate", "512 new"),
        ("decode: attnlib / eager PyTorch", "512 new"),
        ("memory: tiled vs explicit", "N=16384"),
        ("decode step: GQA / SDPA", "G=32, N=8192"), ("decode step: GQA / SDPA", "G=8, N=8192"),
        ("decode step: GQA / SDPA", "G=1, N=8192"),
        ("decode step: bytes copied, N / N/2", "G=32, N=8192"),
        ("decode step: bytes copied, N / N/2", "G=8, N=8192"),
        ("decode step: bytes copied, N / N/2", "G=1, N=8192"),
        ("MLA step: absorbed auto / explicit", "N=4096, d_L=256"),
        ("MLA step: rebuilt / absorbed", "N=4096, d_L=256"),
        ("MLA step: expanded / absorbed", "N=4096, d_L=256"),
        ("serving: paged / contiguous cache", "256 new"),
        ("serving: paged, scattered blocks / contiguous", "256 new"),
        ("serving: paged step, bytes allocated N / N/2", "N=288"),
        ("serving: continuous / static batching", "24 requests"),
        ("serving: blocks on demand / reserved", "16 blocks"),
        ("serving: speculative / plain greedy", "k=2"),
        ("serving: speculative / plain greedy", "k=4"),
        ("serving: speculative / plain greedy", "k=8"),
        ("serving: quantised / float cache", "int8 K, V per token"),
        ("serving: quantised / float cache", "int4 K per channel, V per token"),
        ("serving: HF QuantizedCache (quanto)", "int4, axis_key 0, axis_value 0"),
        ("serving: HF QuantizedCache (quanto)", "int2, axis_key 0, axis_value 0"),
    ]
    by_case = {row[:2]: row[2:] for row in rows}
    assert by_case["decode: attnlib / eager PyTorch", "512 new"] == (
        "2.00 ms/tok", "1.00 ms/tok", "2.00x", "", "eager / HF loop 0.50x")
    assert by_case["attention auto / SDPA", "N=2048"] == (
        "17.60 ms", "16.00 ms", "1.10x", "<= 1.3: met", "max|dY| 2.5e-07")
    assert by_case["attention auto / SDPA", "N=1024"][3] == ""  # judged at N=2048 only
    assert by_case["decode: cache vs none", "1024 new"] == (
        "2.00 s", "40.00 s", "20.0x faster", ">= 10x: met", "tokens identical")
    assert by_case["decode: cached step, late / early", "1024 new"] == (
        "2.50 ms", "2.00 ms", "1.25x", "<= 1.5: met", "no cache: 15.0x")
    assert by_case["decode: attnlib / HF loop", "512 new"] == (
        "2.00 ms/tok", "2.00 ms/tok", "1.00x", "<= 0.6: MISSED", "tokens identical")
    assert by_case["memory: tiled vs explicit", "N=16384"] == (
        "32.0 MiB", "2.0 GiB", "64x less", ">= 20x: met", "max|dY| 1.5e-07")
    assert report.machine_line(sample) == (
        "Measured 2026-05-04 09:30 UTC on device cpu: Example CPU 9000 (16 logical CPUs, "
        "8 torch threads), Linux-6.1-x86_64; Python 3.11.7, torch 2.13.0+cpu, "
        "transformers 5.24.0, attnlib 0.2.0")
    assert by_case["decode step: bytes copied, N / N/2", "G=8, N=8192"] == (
        "14.8 KiB", "14.8 KiB", "1.00x", "<= 1: met", "new K, V row 4.0 KiB")
    assert by_case["MLA step: absorbed auto / explicit", "N=4096, d_L=256"] == (
        "10.00 ms", "20.00 ms", "0.50x", "<= 1.1: met", "max|dY| 3.0e-08")
    assert by_case["MLA step: rebuilt / absorbed", "N=4096, d_L=256"] == (
        "100.00 ms", "10.00 ms", "10.0x slower", ">= 5x: met", "max|dY| 3.0e-08")
    assert by_case["serving: paged / contiguous cache", "256 new"] == (
        "0.52 ms/tok", "0.50 ms/tok", "1.04x (0.98-1.10)", "<= 1.1: met", "tokens identical")
    assert by_case["serving: paged, scattered blocks / contiguous", "256 new"] == (
        "1.50 ms/tok", "0.50 ms/tok", "3.00x (2.75-3.25)", "", "tokens identical")
    assert by_case["serving: paged step, bytes allocated N / N/2", "N=288"] == (
        "42.0 KiB", "42.0 KiB", "1.00x", "<= 1: met",
        "contiguous 42.0 KiB vs 42.0 KiB; scattered 184.0 KiB vs 116.0 KiB")
    assert by_case["serving: blocks on demand / reserved", "16 blocks"] == (
        "5.00 in flight (peak 8)", "3.20 in flight (peak 5)", "1.56x", ">= 1.2x: met",
        "145 vs 208 passes, 22 preemptions; outputs = alone")
    assert by_case["serving: continuous / static batching", "24 requests"] == (
        "12.00 tok/pass", "8.00 tok/pass", "1.50x", "", "100 vs 150 passes; outputs = alone")
    assert by_case["serving: speculative / plain greedy", "k=4"] == (
        "100.00 ms", "80.00 ms", "1.25x", "", "kept 0.62, 0.281 target passes/tok")
    assert by_case["serving: quantised / float cache", "int4 K per channel, V per token"] == (
        "2.8 MiB", "16.0 MiB", "0.172x", "", "loss 1.3300 (+0.0300)")
    assert by_case["serving: HF QuantizedCache (quanto)", "int4, axis_key 0, axis_value 0"] == (
        "", "loss 1.3100", "+0.0100 nats", "", "float 1.3000; HF float = attnlib float")
    assert report.targets_line(sample) == (
        "Targets: 10 of 11 met (missed: decode: attnlib / HF loop)")
    assert any("block_size 128" in note for note in report.notes(sample))


def test_targets_text_says_what_run_py_checks(report, sample):
    """The words the page prints for each target carry the bounds and sizes of TARGETS."""
    run = _run_module()
    assert set(report.TARGET_TEXT) == set(run.TARGETS) == set(report.TARGET_ROWS)
    texts = report.targets_text(sample)
    assert len(texts) == len(sample["targets"])
    assert texts[3] == ("Decode: attnlib / HF loop: over 512 new tokens, attnlib's time per "
                        "token is at most 0.6 times that of Hugging Face's loop with a "
                        "DynamicCache: MISSED.")
    assert ("MLA step: absorbed auto / explicit: at N = 4096, the absorbed path with "
            'impl="auto" takes at most 1.1 times its impl="explicit" time, so never more than '
            "1.1 times the faster of the two: met.") in texts
    for name, goal in run.TARGETS.items():  # every bound and size appears in its sentence
        text = report.TARGET_TEXT[name].format(**goal)
        for value in goal.values():
            assert f"{value:g}" in text, (name, value)


def _run_module() -> ModuleType:
    """benchmarks/run.py, imported with benchmarks/ on the path (for its TARGETS)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location("benchmarks_run", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


def test_rows_leave_targets_blank_when_not_judged(report, sample):
    sample["targets"] = {}
    assert all(row[5] == "" for row in report.rows(sample))
    assert report.targets_line(sample) == "Targets: not judged (quick sizes)"


def test_schema_accepts_the_sample(report, sample):
    assert report.problems(sample) == []


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda r: r.pop("date"), "results: missing field 'date'"),
        (lambda r: r["machine"].pop("cpu"), "results.machine: missing field 'cpu'"),
        (lambda r: r.update(threads="8"), "results.threads: expected an integer, got '8'"),
        (lambda r: r.update(threads=True), "results.threads: expected an integer, got True"),
        (lambda r: r.update(quick="no"), "results.quick: expected true or false"),
        (lambda r: r["machine"].update(gpu=3), "results.machine.gpu: expected a string or null"),
        (lambda r: r.update(attention=[]), "results.attention: expected a non-empty list"),
        (lambda r: r["attention"][1]["seconds"].update(sdpa=float("nan")),
         "results.attention[1].seconds.sdpa: expected a number, got nan"),
        (lambda r: r["hf"]["seconds_per_token"].pop("hf_loop"),
         "results.hf.seconds_per_token: missing field 'hf_loop'"),
        (lambda r: r["memory"]["extra_bytes"].update(tiled=1.5),
         "results.memory.extra_bytes.tiled: expected an integer, got 1.5"),
        (lambda r: r["targets"]["memory_ratio"].pop("met"),
         "results.targets.memory_ratio: missing field 'met'"),
        (lambda r: r["targets"]["memory_ratio"].pop("min"),
         "results.targets.memory_ratio: needs a number 'max' or 'min'"),
        (lambda r: r.update(date="yesterday"), "results.date: expected an ISO 8601 date"),
        (lambda r: r.update(date="2026-05-04T09:30:00"), "results.date: expected a time zone"),
        (lambda r: r.update(schema=0), "results.schema: this run.py writes schema 2"),
    ],
)
def test_schema_names_what_is_wrong(report, sample, edit, expected):
    broken = copy.deepcopy(sample)
    edit(broken)
    found = report.problems(broken)
    assert any(line.startswith(expected) for line in found), found


def test_load_rejects_files_that_are_not_results(report, tmp_path, sample):
    with pytest.raises(ValueError, match="no such file"):
        report.load(tmp_path / "cpu.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"bad\.json: not a JSON file"):
        report.load(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(ValueError, match="results: expected an object"):
        report.load(tmp_path / "list.json")
    (tmp_path / "good.json").write_text(json.dumps(sample))
    assert report.load(tmp_path / "good.json") == sample


def test_committed_results_are_full_runs_named_after_their_device(report):
    """What the performance page shows: benchmarks/results/cpu.json, and any other
    <device>.json, written by `run.py --save` (full sizes, every check passed)."""
    paths = sorted((BENCHMARKS / "results").glob("*.json"))
    assert BENCHMARKS / "results" / "cpu.json" in paths, "run benchmarks/run.py --save"
    for path in paths:
        results = report.load(path)
        assert results["device"].partition(":")[0] == path.stem, path
        assert results["quick"] is False, f"{path} holds a --quick run"
        assert results["checks_passed"] is True, path
        assert len(results["targets"]) == len(report.TARGET_ROWS), path


def _bench_kernels() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_kernels", BENCHMARKS / "bench_kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_kernels_covers_the_grid_and_times_nothing_without_a_gpu(capsys, tmp_path):
    """fp16 and bf16, d 64 and 128, causal and not, N 512 to 16,384; on a CPU it says that
    the interpreter's times would mean nothing, writes nothing, and exits 0."""
    bench = _bench_kernels()
    grid = bench.cases(quick=False)
    assert len(grid) == 2 * 2 * 2 * 6
    assert {c["N"] for c in grid} == {512, 1024, 2048, 4096, 8192, 16384}
    assert {c["d"] for c in grid} == {64, 128} and {c["causal"] for c in grid} == {False, True}
    assert bench.card_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    if bench.torch.cuda.is_available():
        pytest.skip("a GPU is here: the benchmark would time the full grid")
    out = tmp_path / "kernels.json"
    assert bench.main(["--out", str(out)]) == 0
    assert "nothing is timed" in capsys.readouterr().out
    assert not out.exists()


def _bench_serving() -> ModuleType:
    """benchmarks/bench_serving.py, imported with benchmarks/ on the path (it imports its
    neighbours by name)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location("bench_serving",
                                                      BENCHMARKS / "bench_serving.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


@pytest.mark.parametrize("bits", [2, 4])
def test_quanto_unpacking_in_pytorch_inverts_its_packing(bits):
    """The benchmark's PyTorch unpacking gives back every integer optimum-quanto packed, and
    once routed, quanto's own op runs it: nothing is compiled on first use (the compiled
    extension waits on a lock file that a killed run leaves behind)."""
    from optimum.quanto.tensor.packed import pack_weights

    bench = _bench_serving()
    values = torch.randint(0, 2**bits, (8 * 3, 5), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(bits))
    packed = pack_weights(values, bits)
    assert packed.numel() == values.numel() * bits // 8
    assert torch.equal(bench.unpack_uint8(packed, bits), values)
    assert bench.quanto_unpack_in_pytorch(torch.device("cpu")) == "pytorch"
    assert torch.equal(torch.ops.quanto.unpack(packed, bits), values)


def test_a_hung_run_is_stopped_and_says_where_it_was():
    script = ("import sys, time\n"
              "print('benchmark: attention ...', file=sys.stderr, flush=True)\n"
              "time.sleep(60)\n")
    with pytest.raises(pytest.fail.Exception,
                       match=r"still running after 2 s(.|\n)*benchmark: attention \.\.\."):
        run_reporting_hangs([sys.executable, "-c", script], timeout=2)
