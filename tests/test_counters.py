"""DRAM counters (issue 29, item 3; normbench.perf.counters): ncu's bytes for our Triton kernels beside the
interpreter's count and the byte model. Without a GPU, ncu is a stand-in on the PATH that runs the real target
process (our kernels in the interpreter) and reports, per kernel, the bytes the counter counted for that launch: the
whole path runs, and ``measured / counted`` is exactly 1 only if every record went to the right item (a backward's
forward, run for its saved statistics, skipped). What a CPU cannot do: ncu's hardware counters themselves (the GPU
reference run, issue 30)."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

from normbench.core import storage
from normbench.core.exceptions import NormbenchError
from normbench.perf import counters

if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed (pip install 'normbench[triton]')", allow_module_level=True)
pytest.importorskip("torch")

from normbench.perf.traffic import GPUS  # noqa: E402

#: the rows path and the fused one, a half and an fp32 shape: seconds in the interpreter
WORK = counters.items(norms=("layer_norm", "add_rms_norm"), shapes=((16, 256, "float32"), (4, 1024, "bfloat16")))

#: a stand-in for ncu: runs the target command it is given, then writes ncu's CSV for the kernels it predicts
#: (the counted launches, in the target's order), each launch's counted bytes as its DRAM reads, one write byte each
FAKE_NCU = r'''#!{python}
import json, os, subprocess, sys
from pathlib import Path

args = sys.argv[1:]
log = args[args.index("--log-file") + 1]
target = args[args.index("--target-processes") + 2:]
if os.environ.get("FAKE_NCU_REFUSE"):
    Path(log).write_text("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
                         "Performance Counters on the target device 0.\n")
    sys.exit(1)
done = subprocess.run(target)
folder = Path(target[-2]).parent
counted = dict(zip((json.dumps(i, sort_keys=True) for i in json.loads((folder / "items.json").read_text())),
                   json.loads((folder / "counted.json").read_text())))
lines = ['==PROF== Connected to process 1', '"ID","Process ID","Kernel Name","Metric Name","Metric Unit","Metric Value"']
n = 0
for item in json.loads(Path(target[-2]).read_text()):
    forward = counted[json.dumps(dict(item, direction="forward"), sort_keys=True)]
    launches = list(zip(forward["kernels"], forward["launch_bytes"])) if item["direction"] == "backward" else []
    mine = counted[json.dumps(item, sort_keys=True)]
    for kernel, nbytes in launches + list(zip(mine["kernels"], mine["launch_bytes"])):
        lines.append(f'"{{n}}","1","{{kernel}}","dram__bytes_read.sum","Kbyte","{{nbytes / 1000:,.3f}}"')
        lines.append(f'"{{n}}","1","{{kernel}}","dram__bytes_write.sum","byte","1"')
        n += 1
Path(log).write_text("\n".join(lines) + "\n==PROF== Disconnected from process 1\n")
sys.exit(done.returncode)
'''


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    path = tmp_path / "bin" / "ncu"
    path.parent.mkdir()
    path.write_text(FAKE_NCU.format(python=sys.executable))
    path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{path.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("NCU", raising=False)
    return path


def test_each_direction_gets_its_own_kernels_records(fake_ncu, tmp_path):
    assert counters.ncu() == str(fake_ncu)
    rows = counters.measure(WORK, GPUS["h100"], tmp_path / "scratch", timeout=300)
    assert [(r["normalization"], r["direction"], r["rows"]) for r in rows] == [
        (i.norm, i.direction, i.rows) for i in WORK]
    for r in rows:
        kernels = r["kernels"].split("+")
        assert r["measured_read_bytes"] == r["counted_bytes"] and r["measured_write_bytes"] == len(kernels), r
        assert r["measured_over_counted"] == pytest.approx(1 + len(kernels) / r["counted_bytes"], abs=1e-5)
        assert ("backward" in kernels[0]) == (r["direction"] == "backward"), r
        assert kernels[0].startswith(r["normalization"]), r
    counters.write_csv(rows, tmp_path / counters.COUNTERS_FILE)
    table = storage.load(tmp_path / counters.COUNTERS_FILE, counters.COUNTERS)
    assert len(table) == len(WORK) and (table["measured_over_model"] > 0).all()
    lines = counters.table_lines(rows)
    assert lines[0].split()[:3] == ["operation", "direction", "shape"] and len(lines) == len(WORK) + 1


def test_a_profiler_that_refuses_is_one_line_not_a_crash(fake_ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_REFUSE", "1")
    with pytest.raises(counters.CountersUnavailable, match=r"^ncu failed \(exit 1\): ERR_NVGPUCTRPERM - The user"):
        counters.measure(WORK[:1], GPUS["h100"], tmp_path / "scratch", timeout=300)


def test_without_ncu_it_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("NCU", raising=False)
    with pytest.raises(counters.CountersUnavailable, match="ncu .Nsight Compute. is not on the PATH"):
        counters.measure(WORK[:1], GPUS["h100"], tmp_path / "scratch")


def test_records_are_matched_to_items_by_name():
    item = counters.Item("layer_norm", "backward", 8, 256, "bfloat16")
    counted = [{"kernels": ["layer_norm_backward_rows", "layer_norm_reduce_partials"], "unique_bytes": 10}]
    forward = [["layer_norm_forward_rows"]]
    record = lambda name, r, w: (name, {"dram__bytes_read.sum": r, "dram__bytes_write.sum": w})  # noqa: E731
    good = [record("layer_norm_forward_rows", 99, 99), record("layer_norm_backward_rows", 5, 2),
            record("layer_norm_reduce_partials", 1, 1)]
    assert counters.assign([item], counted, forward, good) == [(6, 3)]
    with pytest.raises(NormbenchError, match="expected layer_norm_forward_rows layer_norm_backward_rows "
                                             "layer_norm_reduce_partials, got layer_norm_backward_rows"):
        counters.assign([item], counted, forward, good[1:])
    with pytest.raises(NormbenchError, match="1 kernel.s. more than the items launch: extra"):
        counters.assign([item], counted, forward, good + [record("extra", 1, 1)])


def test_ncu_units_are_bytes_and_other_units_are_refused():
    text = ('"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n'
            '"1","b","dram__bytes_read.sum","Gbyte","1.5"\n"0","a","dram__bytes_write.sum","Mbyte","2,000"\n'
            '"0","a","gpu__time_duration.sum","nsecond","7"')
    assert counters.parse_ncu_csv(text) == [("a", {"dram__bytes_write.sum": 2e9}), ("b", {"dram__bytes_read.sum": 1.5e9})]
    with pytest.raises(NormbenchError, match="in '%', not in bytes"):
        counters.parse_ncu_csv('"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n'
                               '"0","a","dram__bytes_read.sum","%","1"')
    assert counters.parse_ncu_csv("==PROF== nothing profiled") == []


@pytest.mark.parametrize("device, ncu_found, expected", [
    ("cuda:0 (NVIDIA H200)", True, None), ("cuda:0 (NVIDIA H200)", False, "ncu (Nsight Compute) is not on the PATH"),
    ("interpreter (CPU; not for timing)", True, "no Triton backend runs on CUDA here")])
def test_the_run_measures_counters_for_a_triton_backend_on_cuda_with_ncu(tmp_path, monkeypatch, device, ncu_found,
                                                                          expected):
    from types import SimpleNamespace

    from normbench.core.environment import environment, read_environment, write_environment
    from normbench.front.plan import Plan
    from normbench.front.run import _MainJob

    triton = SimpleNamespace(name="triton", requires=("torch", "triton"), device=device)
    plan = Plan(impl="torch,triton", selection=SimpleNamespace(backends=[SimpleNamespace(name="torch", requires=(
        "torch",), device="cuda:0 (NVIDIA H200)"), triton]))
    write_environment(tmp_path, environment("r"))
    monkeypatch.setattr(counters, "ncu", lambda: "/usr/bin/ncu" if ncu_found else None)
    job = _MainJob(plan, [], [], tmp_path, "r")
    chosen = job._counters_backend()
    assert chosen is (None if expected else triton)
    record = read_environment(tmp_path).get("counters")
    assert record == ({"state": "not measured", "reason": expected} if expected else None)
    assert job.sections == ([f"counters (DRAM bytes by ncu): not measured: {expected}"] if expected else [])


def test_the_run_measures_an_operation_at_a_time_and_keeps_what_it_measured(fake_ncu, tmp_path, monkeypatch):
    """``normbench run``'s counters step (on a GPU after the throughput sweep), with the stand-in ncu and tiny
    shapes; the second operation refused: the first's rows are kept, the reason recorded."""
    from types import SimpleNamespace

    from normbench.core.environment import environment, read_environment, write_environment
    from normbench.front.plan import Plan
    from normbench.front.run import _MainJob

    tiny = counters.items
    monkeypatch.setattr(counters, "items", lambda norms=counters.NORMS: tiny(norms, shapes=((16, 256, "float32"),)))
    monkeypatch.setattr(counters, "profile_of", lambda: GPUS["h100"])
    monkeypatch.setattr(counters, "NORMS", ("layer_norm", "rms_norm"))
    real = counters.measure

    def second_refused(work, *args, **kwargs):
        if work[0].norm == "rms_norm":
            monkeypatch.setenv("FAKE_NCU_REFUSE", "1")
        return real(work, *args, **kwargs)

    monkeypatch.setattr(counters, "measure", second_refused)
    write_environment(tmp_path, environment("r"))
    job = _MainJob(Plan(impl="triton"), [], [], tmp_path, "r")
    job._counters(SimpleNamespace(name="triton"))
    table = storage.load(tmp_path / counters.COUNTERS_FILE, counters.COUNTERS)
    assert list(table["normalization"]) == ["layer_norm", "layer_norm"]
    record = read_environment(tmp_path)["counters"]
    assert record["state"] == "measured" and record["rows"] == 2 and record["reason"].startswith("rms_norm: ncu failed")
    assert "stopped: rms_norm: ncu failed" in job.sections[0] and "measured/model" in job.sections[0]
