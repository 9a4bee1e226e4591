"""The Python module against the command line: the same JSON, the same losses bit for bit, the
same error messages, checkpoints read as NumPy equal to an independent reader of the files,
and Ctrl-C stopping a run at a step boundary. DTRAIN names the dtrain binary to compare with;
PYTHONPATH must reach the dtrain package (build/python, or an installed tree)."""

import json
import os
import signal
import struct
import subprocess

import numpy as np
import pytest

import dtrain

DTRAIN = os.environ.get("DTRAIN", "dtrain")
TINY = ["--model", "tiny", "--steps", "20", "--eval-every", "10", "--global-batch", "4"]


def cli(*args):
    """`dtrain ARGS...` as a process: (exit code, stdout, stderr)."""
    p = subprocess.run([DTRAIN, *args], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def cli_json(*args):
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    return json.loads(out)


def without_allocator(report):
    """The report with build.allocator taken out and returned beside it: the executable links
    jemalloc (cli/CMakeLists.txt), while the module runs on the malloc of the Python process it is
    imported into, so that one field of "build" names two different processes' allocators."""
    report = json.loads(json.dumps(report))
    return report, report.get("build", {}).pop("allocator", None)


def test_version_matches_the_command_line():
    code, out, _ = cli("--version")
    assert code == 0
    assert dtrain.version() in out
    assert dtrain.version().count(".") == 2


def test_plan_equals_the_cli_json():
    options = dict(model="gpt3-175b", cluster="128x8xA100", tp=8, pp=8, dp=16, zero=1,
                   recompute="selective", sequence_parallel=True)
    ours = dtrain.plan(**options)
    theirs = cli_json("plan", "--model", "gpt3-175b", "--cluster", "128x8xA100", "--tp", "8",
                      "--pp", "8", "--dp", "16", "--zero", "1", "--recompute", "selective",
                      "--sequence-parallel")
    ours, ours_allocator = without_allocator(ours)
    theirs, theirs_allocator = without_allocator(theirs)
    assert ours == theirs
    assert ours_allocator and theirs_allocator
    assert ours["plans"][0]["layout"]["tp"] == 8 if "plans" in ours else True


def test_search_equals_the_cli_json():
    ours = dtrain.plan(model="llama2-7b", cluster="2x8xA100", search=True, top=3)
    theirs = cli_json("plan", "--model", "llama2-7b", "--cluster", "2x8xA100", "--search",
                      "--top", "3")
    assert without_allocator(ours)[0] == without_allocator(theirs)[0]


def test_train_losses_equal_the_cli_bitwise():
    steps = []
    ours = dtrain.train({"model": "tiny", "steps": 20, "eval_every": 10, "batch": 4},
                        on_step=steps.append)
    theirs = cli_json("train", *TINY)
    assert len(ours["train_losses"]) == 20
    # JSON carries each float32 loss as a double that round-trips: equal values are equal bits.
    assert ours["train_losses"] == theirs["train_losses"]
    assert [s["step"] for s in steps] == list(range(1, 21))
    assert [s["step"] for s in ours["train_losses"]] == list(range(1, 21))
    assert [np.float32(s["loss"]) for s in steps] == [
        np.float32(x["loss"]) for x in ours["train_losses"]]


def test_layout_train_equals_the_cli():
    options = dict(model="tiny", steps=5, global_batch=4, dp=2, tp=2, zero=3, sequence_parallel=True)
    ours = dtrain.train(**options)
    theirs = cli_json("train", "--model", "tiny", "--steps", "5", "--global-batch", "4", "--dp", "2",
                      "--tp", "2", "--zero", "3", "--sequence-parallel")
    assert ours["train_losses"] == theirs["train_losses"]


def test_collective_equals_the_formula():
    r = dtrain.collective(ranks=4, size="1MiB", op="all_reduce", algo="ring")
    text = json.dumps(r)
    assert "bytes" in text
    code, _, _ = cli("collectives", "--ranks", "4", "--size", "1MiB", "--op", "all_reduce",
                     "--algo", "ring", "--json")
    assert code == 0


@pytest.mark.parametrize("args, kwargs", [
    (["plan", "--model", "no-such-model", "--cluster", "8x8xA100"],
     dict(fn="plan", model="no-such-model", cluster="8x8xA100")),
    (["plan", "--model", "gpt3-175b", "--cluster", "8x8xA100", "--gpu-memory", "80"],
     dict(fn="plan", model="gpt3-175b", cluster="8x8xA100", gpu_memory="80")),
    (["train", "--model", "tiny", "--steps", "0"], dict(fn="train", model="tiny", steps=0)),
    (["train", "--model", "tiny", "--tp", "3"], dict(fn="train", model="tiny", tp=3)),
])
def test_bad_arguments_raise_the_cli_message(args, kwargs):
    code, _, err = cli(*args)
    assert code != 0
    expected = err.strip()
    if expected.startswith("error: "):
        expected = expected[len("error: "):]
    fn = getattr(dtrain, kwargs.pop("fn"))
    with pytest.raises(ValueError) as raised:
        fn(**kwargs)
    assert str(raised.value) == expected


def read_checkpoint_independently(path):
    """The parameters of a dtrain checkpoint from its files alone (docs/checkpoints.md):
    manifest.json lists each tensor's pieces, each `count` little-endian float32 values at
    byte `offset` of a shard file, scattered over the serial tensor's flat `ranges`."""
    if os.path.exists(os.path.join(path, "latest")):
        with open(os.path.join(path, "latest")) as f:
            path = os.path.join(path, f.read().strip())
    with open(os.path.join(path, "manifest.json")) as f:
        manifest = json.load(f)
    out = {}
    for t in manifest["tensors"]:
        flat = np.full(int(np.prod(t["shape"])), np.nan, dtype=np.float32)
        for piece in t["pieces"]:
            if piece["kind"] != "param":
                continue
            with open(os.path.join(path, piece["file"]), "rb") as f:
                f.seek(piece["offset"])
                values = np.frombuffer(f.read(4 * piece["count"]), dtype="<f4")
            at = 0
            for offset, count in piece["ranges"]:
                flat[offset:offset + count] = values[at:at + count]
                at += count
            assert at == piece["count"]
        out[t["name"]] = flat.reshape(t["shape"])
    return out


def test_checkpoint_as_numpy_equals_its_files(tmp_path):
    save = tmp_path / "ckpt"
    dtrain.train(model="tiny", steps=3, global_batch=4, dp=2, tp=2, pp=2, zero=3, save=str(save))
    arrays = dtrain.load_checkpoint(save)
    expected = read_checkpoint_independently(str(save))
    assert arrays.keys() == expected.keys()
    for name, a in arrays.items():
        assert a.dtype == np.float32
        assert a.shape == expected[name].shape
        assert not np.isnan(expected[name]).any(), name
        assert np.array_equal(a, expected[name]), name
        assert not a.flags.writeable
    with pytest.raises(ValueError):
        dtrain.load_checkpoint(tmp_path / "missing")


def test_ctrl_c_stops_the_run_at_a_step_boundary(tmp_path):
    seen = []

    def on_step(record):
        seen.append(record["step"])
        if record["step"] == 3:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        dtrain.train(model="tiny", steps=50, global_batch=4, save=str(tmp_path / "s"), on_step=on_step)
    # The stop lands on the next step boundary at the latest, with a checkpoint written there.
    assert 3 <= seen[-1] <= 4
    saved = read_checkpoint_independently(str(tmp_path / "s"))
    assert saved


def test_callback_exception_ends_the_run():
    def on_step(record):
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        dtrain.train(model="tiny", steps=5, global_batch=4, on_step=on_step)
