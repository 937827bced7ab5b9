"""`mpips export`: a run's scalars read back by TensorBoard's own event reader, and
its timeline as a trace in the Trace Event Format (what Perfetto and chrome://tracing
open) read back as JSON and checked against the run log, span by span."""
from __future__ import annotations

import json

import numpy as np
import pytest

from mpips.analysis import export
from mpips.cli import main
from mpips.io.log import RunLog


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("export") / "run"
    assert main(["simulate", "--run-dir", str(run_dir), "--workers", "3", "--slowdown", "1,1,2", "--epochs", "2",
                 "--eval-every", "0.5", "--evaluator", "--progress", "off"]) == 0
    return RunLog(str(run_dir))


def test_the_tensorboard_event_file_reads_back_with_tensorboards_reader(run, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert main(["export", run.run_dir, "--tensorboard", str(tmp_path / "tb")]) == 0
    events = EventAccumulator(str(tmp_path / "tb" / run.name))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"eval/accuracy", "eval/loss", "train/loss", "train/throughput", "train/wait_share",
            "train/staleness"} <= tags, tags
    ev = run.evaluations
    accuracy = events.Scalars("eval/accuracy")
    assert [a.step for a in accuracy] == ev["steps"].tolist()
    assert [a.value for a in accuracy] == pytest.approx(ev["accuracy"].tolist())
    # the run's own (virtual) time, from its start
    started = accuracy[0].wall_time - float(ev["time"][0])
    assert [a.wall_time - started for a in accuracy] == pytest.approx(ev["time"].tolist(), abs=1e-3)
    # the throughput's bins add up to the samples pushed
    bins = export.train_bins(run)
    width = np.diff(np.concatenate([[0.0], bins["end"]]))
    it = run.iterations
    assert float(np.sum(bins["throughput"] * width)) == pytest.approx(float(it["batch"][it["rejected"] == 0].sum()))
    assert "ssp run run" in events.Tensors("run/text_summary")[0].tensor_proto.string_val[0].decode()


def test_the_trace_holds_every_span_of_the_log(run, tmp_path):
    path = tmp_path / "trace.json"
    assert main(["export", run.run_dir, "--trace", str(path)]) == 0
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    assert trace["otherData"]["clock"] == "virtual (simulated)"
    # the Trace Event Format: every event has a phase, pid; spans a ts and dur in microseconds
    for e in events:
        assert e["ph"] in ("X", "M", "C") and isinstance(e["pid"], int), e
        if e["ph"] == "X":
            assert isinstance(e["tid"], int) and e["ts"] >= 0 and e["dur"] >= 0, e
    spans = [e for e in events if e["ph"] == "X"]
    it = run.iterations
    for name, column in (("wait", "wait"), ("pull", "pull"), ("push", "push")):
        for w in range(3):
            mine = it[it["worker"] == w]
            got = sum(e["dur"] for e in spans if e["name"] == name and e["pid"] == export.WORKERS_PID and e["tid"] == w)
            assert got == pytest.approx(1e6 * float(mine[column].sum()), rel=1e-6, abs=1e-3 * len(mine)), (name, w)
    work = [e for e in spans if e["name"] in ("compute", "emulated device time") and e["pid"] == export.WORKERS_PID]
    assert sum(e["dur"] for e in work) == pytest.approx(1e6 * float(it["compute"].sum()), rel=1e-6)
    # an iteration's spans follow each other from its start: the first one starts at it
    first = {(e["tid"], e["args"]["iteration"]): e["ts"] for e in sorted(spans, key=lambda e: -e["ts"])
             if e["pid"] == export.WORKERS_PID}
    assert all(first[(int(r["worker"]), int(r["iteration"]))] == pytest.approx(1e6 * float(r["start"]), abs=1e-3)
               for r in it)
    applies = [e for e in spans if e["name"] == "apply"]
    assert len(applies) == len(run.applies)
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"worker 0 (rank 1)", "worker 2 (rank 3)", "server (rank 0)"} <= names
    counters = [e for e in events if e["ph"] == "C"]
    assert [e["args"]["accuracy"] for e in counters] == pytest.approx(run.evaluations["accuracy"].tolist())


def test_export_without_a_format_is_refused(run, capsys):
    with pytest.raises(SystemExit) as e:
        main(["export", run.run_dir])
    assert e.value.code == 2 and "--tensorboard DIR and/or --trace" in capsys.readouterr().err
