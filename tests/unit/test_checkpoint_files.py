"""Checkpoint files and the run log across segments, without MPI."""
import json
import os

import h5py
import numpy as np
import pytest
import torch

from mpips.config import Config
from mpips.io.checkpoint import (
    CheckpointError,
    _digest,
    checkpoint_files,
    decode,
    encode,
    find_resume,
    read_checkpoint,
    write_checkpoint,
)
from mpips.io.log import RankLog, RunLog, rank_file, write_run_end, write_run_header
from mpips.paradigms import REGISTRY, ClusterView, make_paradigm
from mpips.paradigms.compress import GDTopK
from mpips.paradigms.view import EXTRAS


def log_row(log, table: str, *values) -> None:
    """A row given in its table's column order (RankLog.row takes names)."""
    from mpips.io.log import TABLES
    log.row(table, **dict(zip(TABLES[table].names, values)))


IDENTITY = {"model": "mlp", "dataset": "digits", "parameters": 6, "paradigm": "ssp", "seed": 0,
            "optimizer": "sgd", "servers": 1, "group_servers": 0, "workers": 2}


def _stepped_sgd():
    p = torch.nn.Parameter(torch.arange(6, dtype=torch.float32))
    opt = torch.optim.SGD([p], lr=0.1, momentum=0.9)
    p.grad = torch.ones(6)
    opt.step()
    return p, opt


def test_encode_decode_round_trip_keeps_types_and_int_keys():
    _, opt = _stepped_sgd()
    state = {"optimizer": opt.state_dict(), "ints": np.arange(3, dtype=np.int64),
             "flag": np.array(True), "nan": float("nan"), "nested": [1, (2.5, "x"), None],
             "rng": list(np.random.RandomState(7).get_state()),
             "pcg": np.random.default_rng(3).bit_generator.state, "torch_rng": torch.get_rng_state()}
    text, arrays = encode(state)
    back = decode(text, arrays)
    assert list(back["optimizer"]["state"]) == [0]          # an int key, as torch needs it
    assert torch.equal(back["optimizer"]["state"][0]["momentum_buffer"],
                       opt.state_dict()["state"][0]["momentum_buffer"])
    assert back["ints"].dtype == np.int64 and back["ints"].tolist() == [0, 1, 2]
    assert back["flag"].dtype == bool and back["flag"]
    assert np.isnan(back["nan"]) and back["nested"] == [1, [2.5, "x"], None]
    assert torch.equal(back["torch_rng"], torch.get_rng_state())
    rs = np.random.RandomState()
    rs.set_state(tuple(back["rng"]))
    assert rs.randint(1 << 30) == np.random.RandomState(7).randint(1 << 30)
    g = np.random.default_rng()
    g.bit_generator.state = back["pcg"]
    assert g.random() == np.random.default_rng(3).random()


def test_optimizer_state_resumes_the_same_step():
    p, opt = _stepped_sgd()
    text, arrays = encode(opt.state_dict())
    q = torch.nn.Parameter(p.detach().clone())
    fresh = torch.optim.SGD([q], lr=0.1, momentum=0.9)
    fresh.load_state_dict(decode(text, arrays))
    for param, o in ((p, opt), (q, fresh)):
        param.grad = torch.full((6,), 0.5)
        o.step()
    assert torch.equal(p, q)   # momentum carried over: the same second step


def _view(clocks: np.ndarray, now: float) -> ClusterView:
    n = len(clocks)
    latest = now - 0.01 * np.arange(n)
    times = np.stack([latest, latest - 0.1 * (1 + np.arange(n))], axis=1)
    return ClusterView(now=now, clocks=clocks.copy(), applied=clocks.copy(),
                       push_times=np.where(clocks[:, None] > 0, times, np.nan),
                       iter_times=0.01 * (1 + np.arange(n)), done=np.zeros(n, bool),
                       updates=int(clocks.sum()), extras=np.zeros((n, EXTRAS)))


def _drive(paradigm, clocks: np.ndarray, steps: range) -> list:
    """A made-up history of 4 workers of speeds 1, 1/2, 1/3, 1/4: gates,
    batch sizes, measurements, server decisions; returns every answer."""
    answers = []
    for t in steps:
        view = _view(clocks, float(t))
        answers += [paradigm.server_control(view), paradigm.server_ready(view, clocks)]
        for w in range(4):
            if t % (w + 1) == 0:
                gate = paradigm.gate(w, view)
                answers.append((gate.ok, gate.waiting_for))
                if gate.ok:
                    answers.append(paradigm.batch_size(w, view))
                    answers.append(paradigm.measured(w, clock=int(clocks[w]), batch=16,
                                                     compute=0.01 * (1 + w), transfer=0.002 * (1 + w)))
                    clocks[w] += 1
    return answers


def _encoded(state):
    text, arrays = encode(state)
    return text, [a.tolist() for a in arrays]


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_paradigms_state_survives_a_checkpoint(name):
    def fresh():
        p = make_paradigm(Config(paradigm=name), 4)
        p.set_iterations(100)
        return p

    paradigm, clocks = fresh(), np.zeros(4, np.int64)
    _drive(paradigm, clocks, range(12))
    state = _encoded(paradigm.state())
    if fresh().state():   # a paradigm that keeps state: the history changed it
        assert state != _encoded(fresh().state()), "the made-up history left the state as new"
    restored = fresh()
    restored.load_state(decode(*encode(paradigm.state())))
    assert _encoded(restored.state()) == state
    # and both go on deciding the same
    later = _drive(paradigm, clocks.copy(), range(12, 24))
    assert _drive(restored, clocks.copy(), range(12, 24)) == later


def test_compressor_residual_and_sampling_go_on():
    g = np.random.default_rng(0).normal(size=1000).astype(np.float32)
    a, b = GDTopK(0.05, 0.1, seed=1), GDTopK(0.05, 0.1, seed=99)
    a.compress(g)
    b.load_state(decode(*encode(a.state())))
    assert np.array_equal(a.residual, b.residual)
    out_a, out_b = a.compress(g), b.compress(g)
    assert np.array_equal(out_a.indices, out_b.indices) and np.array_equal(out_a.values, out_b.values)


def _ranks(value):
    return [encode({"role": {"shard": np.full(6, value, np.float32), "clock": r}}) for r in range(3)]


def _meta(step, segment=0):
    return {"number": step // 10, "segment": segment, "step": step, "time": float(step),
            "identity": IDENTITY, "clocks": [step, step], "server_steps": [step]}


def test_written_atomically_newest_two_kept_and_read_back(tmp_path):
    run = str(tmp_path)
    for step in (10, 20, 30):
        write_checkpoint(run, _meta(step), _ranks(step))
    names = sorted(os.listdir(tmp_path / "checkpoints"))
    assert names == ["ckpt-00000020.h5", "ckpt-00000030.h5"]   # no temporary file left
    meta, ranks = read_checkpoint(checkpoint_files(run)[-1])
    assert meta["step"] == 30
    state = decode(*ranks[2])
    assert state["role"]["clock"] == 2 and state["role"]["shard"].tolist() == [30.0] * 6


def _flip_bytes(path, dataset):
    with h5py.File(path, "r") as f:
        offset = f[dataset].id.get_offset()
    with open(path, "r+b") as fh:
        fh.seek(offset + 4)
        b = fh.read(4)
        fh.seek(offset + 4)
        fh.write(bytes(x ^ 0xFF for x in b))


def test_a_corrupt_checkpoint_is_named_in_one_line(tmp_path):
    run = str(tmp_path)
    for step in (10, 20):
        write_checkpoint(run, _meta(step), _ranks(step))
    newest = checkpoint_files(run)[-1]
    _flip_bytes(newest, "rank-1/0")
    with pytest.raises(CheckpointError) as e:
        find_resume(run, IDENTITY)
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(f"checkpoint {newest}: corrupt")
    assert "delete it to resume from ckpt-00000010.h5" in message


def test_a_truncated_checkpoint_is_named(tmp_path):
    run = str(tmp_path)
    path = write_checkpoint(run, _meta(10), _ranks(10))
    with open(path, "r+b") as fh:
        fh.truncate(os.path.getsize(path) // 2)
    with pytest.raises(CheckpointError, match=f"checkpoint {path}: cannot be read.*start afresh"):
        find_resume(run, IDENTITY)


def test_an_incompatible_checkpoint_names_the_mismatch(tmp_path):
    run = str(tmp_path)
    path = write_checkpoint(run, _meta(10), _ranks(10))
    other = {**IDENTITY, "model": "lenet5", "workers": 3}
    with pytest.raises(CheckpointError) as e:
        find_resume(run, other)
    message = str(e.value)
    assert message.startswith(f"checkpoint {path}: made for another run")
    assert "model 'mlp' there, 'lenet5' here" in message and "workers 2 there, 3 here" in message


def test_resume_only_an_unfinished_run(tmp_path):
    run = str(tmp_path)
    write_run_header(run, config={}, layout={}, versions={}, ranks=[0])
    write_checkpoint(run, _meta(10), _ranks(10))
    found = find_resume(run, IDENTITY)
    assert found.meta["step"] == 10 and found.segment == 1 and len(found.ranks) == 3
    write_run_end(run, wall_seconds=1.0, final_params=None)
    assert find_resume(run, IDENTITY) is None   # finished: running again starts over


def _iterations(log, worker, iterations):
    for it in iterations:
        log_row(log, "iterations", worker, it, it, 0, float(it), 0, 0, 0, 0, 0, 16, 1, 1, 0,
                np.nan, np.nan, 0, 0, 0.5, 0, -1, 0, 0.0, 0.0)


def test_runlog_reads_every_segment_and_leaves_out_lost_work(tmp_path):
    run = str(tmp_path)
    cfg = {"paradigm": "ssp", "epochs": 1}
    layout = {"servers": 1, "workers": 2}
    write_run_header(run, config=cfg, layout=layout, versions={}, ranks=[0, 1, 2])
    logs = [RankLog(rank_file(run, r), r) for r in range(3)]
    logs[0].event(0.0, "segment", segment=0, step=0, time=0.0, clocks=[0, 0], server_steps=[0])
    for step in range(1, 13):   # steps 9..12 and iterations 6.. / 7.. are lost
        log_row(logs[0], "applies", 0, float(step), 0, 0, 1, step, step, 1, 0.1, 0.9)
    _iterations(logs[1], 0, range(0, 9))
    _iterations(logs[2], 1, range(0, 10))
    for log in logs:
        log.close()
    cut = {"segment": 1, "step": 8, "time": 8.0, "clocks": [6, 7], "server_steps": [8]}
    write_run_header(run, config=cfg, layout=layout, versions={}, ranks=[0, 1, 2], segment=1)
    logs = [RankLog(rank_file(run, r, 1), r, segment=1) for r in range(3)]
    logs[0].event(8.0, "segment", **cut)
    for step in range(9, 16):
        log_row(logs[0], "applies", 0, float(step), 0, 0, 1, step, step, 1, 0.1, 0.9)
    _iterations(logs[1], 0, range(6, 12))
    _iterations(logs[2], 1, range(7, 12))
    for log in logs:
        log.close()
    assert os.path.exists(os.path.join(run, "rank-1.s1.h5"))
    log = RunLog(run)
    assert log.segments == 2
    for w in (0, 1):
        assert sorted(log.iterations["iteration"][log.iterations["worker"] == w]) == list(range(12))
    assert sorted(log.applies["step"]) == list(range(1, 16))
    assert log.redone["iterations"] == (9 - 6) + (10 - 7) and log.redone["applies"] == 12 - 8
    assert [e["segment"] for e in log.events("segment")] == [0, 1]


def _resealed(path, edit):
    """`edit(f)` on the checkpoint's HDF5 file, then its checksum redone (the
    module's own `_digest`, over what read_checkpoint reads): a file that
    passes its checksum but is not what mpips wrote."""
    def text(ds):
        return ds[()].tobytes().decode()

    with h5py.File(path, "r+") as f:
        edit(f)
        groups = [f[f"rank-{r}"] for r in range(sum(1 for k in f if k.startswith("rank-")))]
        ranks = [(text(g["state"]), [g[str(i)][()] for i in range(len(g) - 1)]) for g in groups]
        f.attrs["sha256"] = _digest(text(f["meta"]), ranks)


def _put(f, name, text):
    del f[name]
    f.create_dataset(name, data=np.frombuffer(text.encode(), dtype=np.uint8))


def _meta_with(**changes):
    meta = {**_meta(10), **changes}
    return lambda f: _put(f, "meta", json.dumps({k: v for k, v in meta.items() if v is not ...}))


@pytest.mark.parametrize("edit, problem", [
    (lambda f: f.__delitem__("rank-2"), "holds the states of 2 ranks, this job has 3"),
    (_meta_with(segment=...), "its meta has segment=None, not an integer"),
    (_meta_with(segment="0"), "its meta has segment='0', not an integer"),
    (_meta_with(time=True), "its meta has time=True, not a number"),
    (_meta_with(identity=["mlp"]), "its meta has identity=['mlp'], not a JSON object"),
    (_meta_with(clocks=[10, 1.5]), "its meta has clocks=[10, 1.5], not a list of integers"),
    (lambda f: _put(f, "meta", "[1, 2]"), "its meta is not a JSON object"),
    (lambda f: _put(f, "meta", "{not json"), "its meta is not a JSON object"),
    (lambda f: _put(f, "rank-1/state", '{"role": {"__tensor__": 5}}'),
     "rank-1/state: not a state mpips wrote (ValueError: refers to array 5 of 1)"),
    (lambda f: _put(f, "rank-1/state", '{"role": {"__items__": [[1, 2, 3]]}}'), "rank-1/state: not a state"),
    (lambda f: _put(f, "rank-1/state", '{"role": '), "rank-1/state: not a state mpips wrote (JSONDecodeError"),
    (lambda f: (_put(f, "rank-0/state", '{"w": {"__tensor__": 0}}'), f.__delitem__("rank-0/0"),
                f.create_dataset("rank-0/0", data=np.array([b"ab", b"c"]))),   # a tensor of strings
     "rank-0/state: not a state mpips wrote (TypeError"),
])
def test_a_checkpoint_not_shaped_as_mpips_writes_it_is_one_line(tmp_path, edit, problem):
    # (each passes its checksum; before, find_resume or a rank's decode raised
    # KeyError, TypeError, AttributeError, IndexError or JSONDecodeError, or
    # mpi4py's scatter failed on the rank count, each a traceback)
    run = str(tmp_path)
    write_checkpoint(run, _meta(5), _ranks(5))
    path = write_checkpoint(run, _meta(10), _ranks(10))
    _resealed(path, edit)
    with pytest.raises(CheckpointError) as e:
        find_resume(run, IDENTITY, 3)
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"checkpoint {path}: {problem}"), message


def test_decode_says_what_is_not_an_encoded_state():
    for text, arrays in (('{"__array__": 1}', [np.zeros(2)]), ('{"__tensor__": "0"}', [np.zeros(2)]),
                         ('{"__items__": 3}', []), ("[", [])):
        with pytest.raises(ValueError, match="not a state mpips wrote"):
            decode(text, arrays)
