"""The lab's tests: each exercise's answer against values derived here, independently, and, when the
dtrain Python module is importable, against what the engine measures or plans.

LAB_MODULE names the module under test: `lab` (default, your work) or `solution`. A wrong answer
fails with what was expected and why. The engine checks are skipped, with the reason, when the
module is not built (scripts/setup builds it into build/python when pybind11 is installed).
"""

import importlib
import json
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
LAB_MODULE = os.environ.get("LAB_MODULE", "lab")
lab = importlib.import_module(LAB_MODULE)


def _import_dtrain():
    """The dtrain module from PYTHONPATH, else from this checkout's build/python."""
    try:
        return importlib.import_module("dtrain"), ""
    except ImportError as first:
        build = os.path.join(os.path.dirname(HERE), "build", "python")
        if os.path.isdir(os.path.join(build, "dtrain")):
            sys.path.append(build)
            try:
                return importlib.import_module("dtrain"), ""
            except ImportError as second:
                return None, str(second)
        return None, str(first)


dtrain, _why_no_engine = _import_dtrain()
engine = pytest.mark.skipif(
    dtrain is None,
    reason="the dtrain Python module is not importable (" + _why_no_engine + "); build it with "
    "scripts/setup (needs pybind11-dev, python3-dev) and set PYTHONPATH=build/python")


def expect(got, want, why, rel=1e-9):
    """Fails with `why; you returned GOT` unless got equals want (numbers: within rel)."""
    if isinstance(want, bool) or not isinstance(want, (int, float, np.number)):
        ok = got == want
    else:
        ok = got is not None and not isinstance(got, bool) and got == pytest.approx(want, rel=rel)
    assert ok, f"{why}; you returned {got!r}"


def rank_data(n, size, seed=0, dtype=np.float32):
    """n ranks' vectors of small integers: their sums are exact in float32 in any order."""
    rng = np.random.default_rng(seed + 97 * n + size)
    return [rng.integers(-8, 9, size).astype(dtype) for _ in range(n)]


# ==================================================================================================
# 1. Collectives
# ==================================================================================================


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7])
def test_ring_reduce_scatter_leaves_chunk_r_summed_on_rank_r(n):
    inputs = rank_data(n, 7 * n + 3)  # uneven chunks too
    before = [x.copy() for x in inputs]
    out, _ = lab.ring_reduce_scatter(inputs)
    total = np.sum(inputs, axis=0)
    want = np.array_split(total, n)
    assert len(out) == n, f"one output per rank: {n}; you returned {len(out)}"
    for r in range(n):
        np.testing.assert_array_equal(
            out[r], want[r], err_msg=f"rank {r} must hold chunk {r} of the sum over all ranks")
    for a, b in zip(inputs, before):
        np.testing.assert_array_equal(a, b, err_msg="the inputs must not be modified")


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_reduce_scatter_steps_and_bytes(n):
    size = 64 * n  # elements; float32
    _, stats = lab.ring_reduce_scatter(rank_data(n, size))
    chunk_bytes = size // n * 4
    for r in range(n):
        expect(stats["steps"][r], n - 1,
               f"a ring reduce-scatter on {n} ranks takes N-1 = {n - 1} steps "
               "(each chunk must visit every other rank once)")
        expect(stats["bytes_sent"][r], (n - 1) * chunk_bytes,
               f"rank {r} sends one chunk of S/N = {chunk_bytes} B per step, (N-1)/N * S = "
               f"{(n - 1) * chunk_bytes} B")


@pytest.mark.parametrize("n", [1, 2, 5])
def test_ring_all_gather_gives_every_rank_everything(n):
    shards = rank_data(n, 6, seed=3)
    shards = [s[: 3 + r % 2] for r, s in enumerate(shards)]  # unequal shards
    out, stats = lab.ring_all_gather(shards)
    for r in range(n):
        np.testing.assert_array_equal(out[r], np.concatenate(shards),
                                      err_msg=f"rank {r} must end with all {n} shards in order")
        expect(stats["steps"][r], n - 1, f"a ring all-gather on {n} ranks takes N-1 steps")


def test_ring_all_gather_bytes():
    n, shard = 4, 32
    _, stats = lab.ring_all_gather(rank_data(n, shard, seed=5))
    for r in range(n):
        expect(stats["bytes_sent"][r], (n - 1) * shard * 4,
               f"each rank forwards N-1 = {n - 1} shards of {shard * 4} B in a ring all-gather")


@pytest.mark.parametrize("n,size", [(1, 5), (2, 8), (3, 10), (4, 1), (6, 50)])
def test_ring_all_reduce_sums_on_every_rank(n, size):
    inputs = rank_data(n, size, seed=11)
    out, _ = lab.ring_all_reduce(inputs)
    total = np.sum(inputs, axis=0)
    for r in range(n):
        np.testing.assert_array_equal(out[r], total,
                                      err_msg=f"rank {r} must hold the sum over all {n} ranks")


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_all_reduce_takes_2_n_minus_1_steps_and_2s_n_minus_1_over_n_bytes(n):
    size = 128 * n
    s_bytes = size * 4
    _, stats = lab.ring_all_reduce(rank_data(n, size))
    steps = (n - 1) + (n - 1)  # reduce-scatter, then all-gather
    sent = (n - 1) * (s_bytes // n) * 2  # N-1 chunks of S/N in each phase
    for r in range(n):
        expect(stats["steps"][r], steps,
               f"ring all-reduce on {n} ranks takes 2(N-1) = {steps} steps")
        expect(stats["bytes_sent"][r], sent,
               f"ring all-reduce of S = {s_bytes} B on {n} ranks sends 2 S (N-1)/N = {sent} B "
               "per rank")


def test_ring_all_reduce_is_reduce_scatter_then_all_gather():
    n = 5
    inputs = rank_data(n, 40, seed=2)
    shards, first = lab.ring_reduce_scatter(inputs)
    _, second = lab.ring_all_gather(shards)
    _, whole = lab.ring_all_reduce(inputs)
    for key in ("steps", "bytes_sent"):
        want = [a + b for a, b in zip(first[key], second[key])]
        assert whole[key] == want, (
            f"the ring all-reduce is a reduce-scatter then an all-gather: its {key} per rank are "
            f"their sum, {want}; you returned {whole[key]}")


@pytest.mark.parametrize("n,root", [(4, 0), (5, 2)])
def test_naive_all_reduce_through_a_root(n, root):
    size = 16
    inputs = rank_data(n, size, seed=7)
    out, stats = lab.naive_all_reduce(inputs, root=root)
    for r in range(n):
        np.testing.assert_array_equal(out[r], np.sum(inputs, axis=0),
                                      err_msg=f"rank {r} must hold the sum")
        if r == root:
            expect(stats["steps"][r], 2 * (n - 1),
                   "the root receives from and sends to each of the N-1 others: 2(N-1) steps")
            expect(stats["bytes_sent"][r], (n - 1) * size * 4,
                   f"the root sends the whole S = {size * 4} B to each of N-1 = {n - 1} ranks")
        else:
            expect(stats["steps"][r], 2, "a non-root rank sends once and receives once")
            expect(stats["bytes_sent"][r], size * 4, "a non-root rank sends its whole S once")


def test_the_ring_root_bottleneck_contrast():
    n, size = 8, 64
    _, ring = lab.ring_all_reduce(rank_data(n, size))
    _, naive = lab.naive_all_reduce(rank_data(n, size))
    assert max(naive["bytes_sent"]) > 3 * max(ring["bytes_sent"]), (
        f"with 8 ranks the naive root sends (N-1) S = 7 S while a ring rank sends 2 S (N-1)/N = "
        f"1.75 S; you returned root {max(naive['bytes_sent'])} B, ring {max(ring['bytes_sent'])} B")


@pytest.mark.parametrize("n", [1, 2, 3, 16, 1024])
def test_ring_all_reduce_cost_closed_form(n):
    size = 1 << 20
    steps, sent = lab.ring_all_reduce_cost(n, size)
    expect(steps, 2 * (n - 1), f"ring all-reduce on {n} ranks takes 2(N-1) = {2 * (n - 1)} steps")
    expect(sent, 2 * size * (n - 1) / n,
           f"a rank sends (N-1)/N S in the reduce-scatter and again in the all-gather: "
           f"{2 * size * (n - 1) / n} B")


@engine
@pytest.mark.parametrize("op", ["reduce_scatter", "all_gather", "all_reduce"])
def test_ring_counts_equal_dtrain_collectives_measured(op):
    n, size = 4, 1 << 16  # --size: all_reduce's buffer, reduce_scatter's input, all_gather's output
    elements = size // 4
    mine = {"reduce_scatter": lambda: lab.ring_reduce_scatter(rank_data(n, elements))[1],
            "all_gather": lambda: lab.ring_all_gather(rank_data(n, elements // n))[1],
            "all_reduce": lambda: lab.ring_all_reduce(rank_data(n, elements))[1]}[op]()
    report = dtrain.collective(ranks=n, size=f"{size}B", op=op, algo="ring", trials=1,
                               trial_seconds=0.01)
    for rank in report["per_rank"]:
        r = rank["rank"]
        expect(mine["steps"][r], rank["steps"],
               f"dtrain collectives measured {rank['steps']} steps on rank {r} for a ring {op} "
               f"on {n} ranks")
        expect(mine["bytes_sent"][r], rank["bytes_sent"],
               f"dtrain collectives measured {rank['bytes_sent']} B sent by rank {r} for a ring "
               f"{op} of {size} B on {n} ranks")


@engine
def test_naive_counts_equal_dtrain_collectives_measured():
    n, size = 4, 1 << 16
    _, mine = lab.naive_all_reduce(rank_data(n, size // 4), root=0)
    report = dtrain.collective(ranks=n, size=f"{size}B", op="all_reduce", algo="naive", trials=1,
                               trial_seconds=0.01)
    for rank in report["per_rank"]:
        r = rank["rank"]
        expect(mine["steps"][r], rank["steps"],
               f"dtrain measured {rank['steps']} steps on rank {r} of a naive all-reduce")
        expect(mine["bytes_sent"][r], rank["bytes_sent"],
               f"dtrain measured {rank['bytes_sent']} B sent by rank {r} of a naive all-reduce")


# ==================================================================================================
# 2. Data parallelism
# ==================================================================================================


def mlp_problem(batch=8, seed=0):
    rng = np.random.default_rng(seed)
    params = {"w1": rng.normal(size=(5, 7)), "b1": rng.normal(size=7) * 0.1,
              "w2": rng.normal(size=(7, 3)), "b2": rng.normal(size=3) * 0.1}
    return params, rng.normal(size=(batch, 5)), rng.normal(size=(batch, 3))


def test_mlp_loss_and_backward_match_finite_differences():
    params, x, y = mlp_problem()
    loss, grads = lab.mlp_forward_backward(params, x, y)
    out = np.maximum(x @ params["w1"] + params["b1"], 0) @ params["w2"] + params["b2"]
    expect(loss, 0.5 * np.mean(np.sum((out - y) ** 2, axis=1)),
           "the loss is the mean over rows of 0.5 ||out - y||^2")
    eps = 1e-6
    for name, p in params.items():
        assert grads[name].shape == p.shape, (
            f"grads[{name!r}] has the parameter's shape {p.shape}; you returned "
            f"{grads[name].shape}")
        numeric = np.zeros_like(p)
        for i in np.ndindex(p.shape):
            plus = {k: v.copy() for k, v in params.items()}
            minus = {k: v.copy() for k, v in params.items()}
            plus[name][i] += eps
            minus[name][i] -= eps
            numeric[i] = (lab.mlp_forward_backward(plus, x, y)[0]
                          - lab.mlp_forward_backward(minus, x, y)[0]) / (2 * eps)
        np.testing.assert_allclose(grads[name], numeric, rtol=1e-5, atol=1e-7,
                                   err_msg=f"d loss / d {name} against central differences")


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_data_parallel_average_gradient_equals_the_full_batch_gradient(n):
    params, x, y = mlp_problem(batch=16, seed=n)
    _, full = lab.mlp_forward_backward(params, x, y)
    per_rank, stats = lab.data_parallel_gradients(params, x, y, n)
    assert len(per_rank) == n, f"one gradient dict per rank ({n}); you returned {len(per_rank)}"
    for r, grads in enumerate(per_rank):
        for name in params:
            np.testing.assert_allclose(
                grads[name], full[name], rtol=1e-10, atol=1e-12,
                err_msg=f"rank {r}'s averaged {name} gradient over {n} equal shards must equal "
                "the full batch's: the loss is a mean, so the mean of shard means is the mean")
    expect(stats["steps"][0], 2 * (n - 1),
           f"the gradients are averaged with one ring all-reduce on {n} ranks: 2(N-1) steps")


def test_data_parallel_update_equals_the_big_batch_update():
    params, x, y = mlp_problem(batch=12, seed=4)
    lr = 0.1
    _, full = lab.mlp_forward_backward(params, x, y)
    want = {k: params[k] - lr * full[k] for k in params}
    per_rank, _ = lab.data_parallel_gradients(params, x, y, 3)
    for r, grads in enumerate(per_rank):
        got = lab.sgd_update(params, grads, lr)
        for k in params:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-10, atol=1e-12,
                                       err_msg=f"rank {r}'s updated {k} must equal one big batch's")


def test_data_parallel_refuses_unequal_shards():
    params, x, y = mlp_problem(batch=10)
    with pytest.raises(ValueError):
        lab.data_parallel_gradients(params, x, y, 3)  # 10 rows do not split into 3 equal shards


def test_sgd_update_leaves_the_params_alone():
    params, x, y = mlp_problem()
    before = {k: v.copy() for k, v in params.items()}
    grads = {k: np.ones_like(v) for k, v in params.items()}
    new = lab.sgd_update(params, grads, 0.5)
    for k in params:
        np.testing.assert_array_equal(params[k], before[k], err_msg="params must not be modified")
        np.testing.assert_allclose(new[k], before[k] - 0.5, err_msg=f"{k} - lr * grad")


# ==================================================================================================
# 3. Tensor parallelism
# ==================================================================================================


def linear_problem(seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(6, 8)), rng.normal(size=(8, 12)), rng.normal(size=12)


@pytest.mark.parametrize("tp", [1, 2, 3, 4])
def test_column_parallel_concatenates_to_the_serial_layer(tp):
    x, w, b = linear_problem()
    outs = lab.column_parallel_forward(x, w, b, tp)
    assert len(outs) == tp, f"one output slice per rank ({tp}); you returned {len(outs)}"
    for r, (o, cols) in enumerate(zip(outs, np.array_split(np.arange(12), tp))):
        np.testing.assert_allclose(o, x @ w[:, cols] + b[cols], rtol=1e-12,
                                   err_msg=f"rank {r} computes output columns {list(cols)}")
    np.testing.assert_allclose(np.concatenate(outs, axis=1), x @ w + b, rtol=1e-12)


@pytest.mark.parametrize("tp", [2, 4])
def test_row_parallel_needs_one_all_reduce(tp):
    x, w, b = linear_problem(1)
    x_shards = np.array_split(x, tp, axis=1)
    outs, stats = lab.row_parallel_forward(x_shards, w, b, tp)
    for r in range(tp):
        np.testing.assert_allclose(outs[r], x @ w + b, rtol=1e-10, atol=1e-12,
                                   err_msg=f"rank {r} must hold the full output after the sum")
    out_bytes = x.shape[0] * w.shape[1] * 8  # float64 output
    expect(stats["steps"][0], 2 * (tp - 1),
           "the ranks' partial sums x_r W_r are combined by one ring all-reduce: 2(t-1) steps")
    expect(stats["bytes_sent"][0], 2 * (tp - 1) * out_bytes / tp,
           f"one ring all-reduce of the {out_bytes} B output: 2 (t-1)/t x {out_bytes} B")


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_tp_mlp_forward_equals_the_serial_mlp(tp):
    rng = np.random.default_rng(tp)
    x = rng.normal(size=(5, 8))
    w1, b1 = rng.normal(size=(8, 16)), rng.normal(size=16)
    w2, b2 = rng.normal(size=(16, 8)), rng.normal(size=8)
    outs, stats = lab.tp_mlp_forward(x, w1, b1, w2, b2, tp)
    want = np.maximum(x @ w1 + b1, 0) @ w2 + b2
    for r in range(tp):
        np.testing.assert_allclose(outs[r], want, rtol=1e-10, atol=1e-12,
                                   err_msg=f"rank {r}: column W1, ReLU, row W2 = the serial MLP")
    expect(stats["steps"][0], 2 * (tp - 1),
           "the column-then-row MLP needs exactly one all-reduce forward (after W2): the ReLU "
           "acts on each rank's own columns")


@pytest.mark.parametrize("which,needs,why", [
    ("column_forward", False, "each rank computes its own output columns from the whole input"),
    ("row_forward", True, "each rank holds a partial sum x_r W_r of the same output"),
    ("column_backward", True, "dL/dx = sum_r dL/dy_r W_r^T is a partial sum on each rank"),
    ("row_backward", False, "dL/dx_r = dL/dy W_r^T needs only dL/dy, which every rank has"),
])
def test_which_pass_needs_the_all_reduce(which, needs, why):
    answer = lab.tp_communication()
    expect(answer[which], needs, f"{which} {'needs' if needs else 'needs no'} all-reduce: {why}")


def test_tp_allreduce_bytes_per_rank():
    tokens, hidden = 2048, 12288
    for tp in (2, 8):
        # A ring reduce-scatter then all-gather of the (tokens, hidden) bf16 activation: each
        # phase sends t-1 of its t chunks.
        activation = tokens * hidden * 2
        want = (tp - 1) * (activation / tp) + (tp - 1) * (activation / tp)
        expect(lab.tp_allreduce_bytes(tokens, hidden, tp, 2), want,
               f"a ring all-reduce of {activation} B on {tp} ranks sends 2 (t-1)/t of it")
        expect(lab.tp_bytes_per_layer(tokens, hidden, tp, 2), 4 * want,
               "a layer does 4 all-reduces per micro-batch: attention and MLP, forward and "
               "backward")
    expect(lab.tp_allreduce_bytes(tokens, hidden, 1, 2), 0, "one TP rank sends nothing")


@engine
@pytest.mark.parametrize("tp", [2, 4])
def test_tp_bytes_equal_dtrain_train_measured(tp):
    batch, layers = 8, 2
    report = dtrain.train(model="tiny", steps=1, tp=tp, global_batch=batch, eval_every=1000)
    model = report["model"]
    assert model["layers"] == layers
    mine = lab.tp_bytes_per_layer(batch * model["context"], model["channels"], tp, 4) * layers
    measured = report["layout"]["ranks"][0]["bytes_per_step"]["tp_block"]
    expect(mine, measured,
           f"dtrain train --tp {tp} measured {measured} B of TP all-reduces per step in the "
           f"transformer blocks (fp32, {layers} layers, {batch} x {model['context']} tokens, "
           f"C = {model['channels']})")


# ==================================================================================================
# 4. Pipeline parallelism
# ==================================================================================================


@pytest.mark.parametrize("p,m", [(1, 4), (2, 1), (4, 4), (8, 8), (8, 64)])
def test_pipeline_bubble_formula(p, m):
    # Time in slots of one forward + one backward: M busy slots, plus P-1 slots for the first
    # micro-batch to fill the pipe (and the last to drain it).
    busy, total = m, m + p - 1
    expect(lab.pipeline_bubble(p, m), (total - busy) / total,
           f"with P={p} stages and M={m} micro-batches the bubble is (P-1)/(M+P-1) = "
           f"{p - 1}/{m + p - 1}")


def test_more_microbatches_shrink_the_bubble():
    bubbles = [lab.pipeline_bubble(8, m) for m in (1, 2, 4, 8, 16, 64, 1024)]
    assert all(a > b for a, b in zip(bubbles, bubbles[1:])), (
        f"the bubble (P-1)/(M+P-1) falls as M grows; you returned {bubbles}")
    assert bubbles[-1] < 0.01, "with M >> P the bubble tends to 0"


@pytest.mark.parametrize("p,target", [(8, 0.1), (4, 0.05), (8, 0.5), (2, 0.01)])
def test_microbatches_for_a_target_bubble(p, target):
    m = 1
    while (p - 1) / (m + p - 1) > target:
        m += 1
    expect(lab.microbatches_for_bubble(p, target), m,
           f"the fewest micro-batches with (P-1)/(M+P-1) <= {target} at P={p} is {m}")


def check_timeline(timeline, p, m, schedule):
    """The timeline's invariants, derived from the dependencies alone."""
    stages = timeline["stages"]
    assert len(stages) == p, f"one op list per stage ({p}); you returned {len(stages)}"
    end = {}
    for s, ops in enumerate(stages):
        kinds = sorted((k, mb) for _, k, mb in ops)
        want = sorted([("F", i) for i in range(m)] + [("B", i) for i in range(m)])
        assert kinds == want, f"{schedule}: stage {s} runs each F and each B once"
        starts = [t for t, _, _ in ops]
        assert starts == sorted(starts) and len(set(starts)) == len(starts), (
            f"{schedule}: stage {s} runs one unit-time op at a time, in order; starts {starts}")
        for t, k, mb in ops:
            end[(k, s, mb)] = t + 1
    for (k, s, mb), t_end in end.items():
        start = t_end - 1
        if k == "F" and s > 0:
            assert start >= end[("F", s - 1, mb)], f"F({s},{mb}) before F({s - 1},{mb}) ended"
        if k == "B":
            assert start >= end[("F", s, mb)], f"B({s},{mb}) before F({s},{mb}) ended"
            if s < p - 1:
                assert start >= end[("B", s + 1, mb)], f"B({s},{mb}) before B({s + 1},{mb})"
    expect(timeline["makespan"], max(end.values()), "makespan = the time the last op ends")


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p,m", [(1, 3), (2, 4), (4, 4), (4, 8), (8, 8), (3, 2)])
def test_simulated_schedule_is_valid_and_its_bubble_is_the_formula(schedule, p, m):
    timeline = lab.simulate_pipeline(schedule, p, m)
    check_timeline(timeline, p, m, schedule)
    expect(timeline["makespan"], 2 * (m + p - 1),
           f"{schedule} with unit F and B: M forwards and M backwards per stage plus P-1 slots "
           f"to fill and P-1 to drain = 2(M+P-1) = {2 * (m + p - 1)}")
    expect(lab.timeline_bubble(timeline), (p - 1) / (m + p - 1),
           f"the simulated idle share equals (P-1)/(M+P-1) for {schedule}")


@pytest.mark.parametrize("p,m", [(4, 8), (8, 8), (8, 64), (4, 2)])
def test_peak_in_flight_gpipe_m_and_1f1b_p(p, m):
    for schedule in ("gpipe", "1f1b"):
        timeline = lab.simulate_pipeline(schedule, p, m)
        got = lab.peak_in_flight(timeline)
        # Count it here too, from the timeline: +1 at each F, -1 at each B, in time order.
        counted = []
        for ops in timeline["stages"]:
            live, peak = 0, 0
            for _, k, _ in sorted(ops):
                live += 1 if k == "F" else -1
                peak = max(peak, live)
            counted.append(peak)
        assert got == counted, f"peak in flight per stage of your timeline is {counted}; you " \
                               f"returned {got}"
        if schedule == "gpipe":
            want = [m] * p
            why = "GPipe runs all M forwards before the first backward: M in flight everywhere"
        else:
            want = [min(p - s, m) for s in range(p)]
            why = "1F1B holds P-s micro-batches on stage s (warm-up P-s-1, then one more)"
        assert got == want, f"{why}: {want}; you returned {got}"


def test_unknown_schedule_is_refused():
    with pytest.raises(ValueError):
        lab.simulate_pipeline("zigzag", 4, 4)


@engine
@pytest.mark.parametrize("m", [8, 64])
def test_bubble_equals_dtrain_plan(m):
    mine = lab.pipeline_bubble(8, m)
    plan = dtrain.plan(model="gpt3-175b", cluster="8x8xA100", tp=8, pp=8, dp=1, global_batch=m)
    assert plan["plan"]["microbatches"] == m
    # The closed form on equal stages; the plan's own fraction_of_total is the schedule
    # simulated on its real stages (the head makes the last one slower), a little below it.
    theirs = plan["plan"]["bubble"]["formula_fraction_of_total"]
    expect(mine, theirs, f"dtrain plan's bubble formula at P=8, M={m} is {theirs}")
    simulated = plan["plan"]["bubble"]["fraction_of_total"]
    assert 0.9 * theirs < simulated <= theirs, (
        f"the simulated bubble {simulated} sits just below the formula {theirs}")


@engine
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_in_flight_equals_dtrain_train_measured(schedule):
    p, m = 4, 8
    mine = lab.peak_in_flight(lab.simulate_pipeline(schedule, p, m))
    report = dtrain.train(model="tiny", layers=p, steps=1, pp=p, microbatches=m, global_batch=m,
                          schedule=schedule, eval_every=1000)
    measured = [0] * p
    for rank in report["layout"]["ranks"]:
        stage = int(rank["coords"].split("pp")[1])
        measured[stage] = rank["activations"]["inflight_microbatches"]
    assert mine == measured, (
        f"dtrain train --pp {p} --microbatches {m} --schedule {schedule} measured "
        f"{measured} micro-batches in flight per stage; you returned {mine}")


# ==================================================================================================
# 5. ZeRO
# ==================================================================================================


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_memory_per_gpu_mixed_precision(stage):
    psi, n = 7_000_000_000, 8
    got = lab.zero_memory_per_gpu(psi, n, stage)
    # What each stage shards: stage >= 1 the optimizer, >= 2 the gradients, 3 the weights.
    sharded = {"optimizer": stage >= 1, "grads": stage >= 2, "params": stage >= 3}
    per_param = {"params": 2, "grads": 2, "optimizer": 12}  # bf16, bf16, fp32 master + m + v
    want = {k: psi * per_param[k] / (n if sharded[k] else 1) for k in per_param}
    for k, v in want.items():
        expect(got[k], v, f"ZeRO-{stage} on {n} GPUs: {k} are {per_param[k]} B/param"
               f"{', sharded 1/N' if sharded[k] else ', replicated'} = {v:.4g} B")
    expect(got["total"], sum(want.values()), "total = params + grads + optimizer")


def test_zero_3_divides_16_bytes_per_parameter_by_n():
    psi = 1_000_000
    for n in (1, 2, 16, 64):
        expect(lab.zero_memory_per_gpu(psi, n, 3)["total"], 16 * psi / n,
               f"ZeRO-3 shards all 2 + 2 + 12 = 16 B/param over {n} GPUs")
        expect(lab.zero_memory_per_gpu(psi, n, 0, 4, 4, 8)["total"], 16 * psi,
               "stage 0 replicates everything whatever the element sizes")
    with pytest.raises(ValueError):
        lab.zero_memory_per_gpu(psi, 4, 4)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_communication_per_stage(stage):
    psi, n = 1_000_000, 8
    share = psi * (n - 1) / n  # elements a rank sends in one reduce-scatter or all-gather
    collectives = {0: 2, 1: 2, 2: 2, 3: 3}[stage]  # all-reduce = RS + AG; ZeRO-3: AG twice + RS
    why = ("1.5x the all-reduce: weights gathered forward and backward" if stage == 3
           else "as much as one all-reduce")
    expect(lab.zero_comm_bytes_per_gpu(psi, n, stage), collectives * share * 2,
           f"ZeRO-{stage} sends {collectives} (N-1)/N Psi bf16 elements per GPU per step ({why})")


@engine
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_memory_equals_dtrain_train_measured(stage):
    n = 4
    report = dtrain.train(model="tiny", steps=1, dp=n, zero=stage, precision="bf16",
                          eval_every=1000)
    psi = report["model"]["params"]
    mine = lab.zero_memory_per_gpu(psi, n, stage)  # bf16 mixed precision: 2 + 2 + 12
    for rank in report["layout"]["ranks"]:
        for state in rank["state"]:
            expect(mine[state["tag"]], state["current_bytes"],
                   f"dtrain train --precision bf16 --dp {n} --zero {stage} measured "
                   f"{state['current_bytes']} B of {state['tag']} on rank {rank['rank']} "
                   f"({psi} parameters)")


@engine
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_memory_equals_dtrain_plan(stage):
    plan = dtrain.plan(model="llama2-13b", cluster="1x8xA100", dp=8, zero=stage)
    psi = plan["model"]["params"]
    mine = lab.zero_memory_per_gpu(psi, 8, stage)
    for key in ("params", "grads", "optimizer"):
        theirs = plan["plan"]["memory"][key + "_bytes"]
        expect(mine[key], theirs, f"dtrain plan (llama2-13b, dp=8, zero={stage}) plans {theirs} "
               f"B of {key} per GPU")


@engine
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_communication_equals_dtrain_train_measured(stage):
    n = 4
    report = dtrain.train(model="tiny", steps=1, dp=n, zero=stage, precision="bf16",
                          grad_reduce="bf16", dp_algo="ring", eval_every=1000)
    psi = report["model"]["params"]
    mine = lab.zero_comm_bytes_per_gpu(psi, n, stage, 2, 2)
    for rank in report["layout"]["ranks"]:
        measured = rank["bytes_per_step"]["dp"]
        expect(mine, measured, f"dtrain train --dp {n} --zero {stage} (bf16 on the wire, ring) "
               f"measured {measured} B of DP syncs sent by rank {rank['rank']} per step")


# ==================================================================================================
# 6. Scenarios
# ==================================================================================================


def test_activation_bytes_per_layer():
    s, b, h, a = 2048, 2, 4096, 32
    # Linear inputs, GeLU, dropout masks and norms: 34 bytes per (s, b, h) element at bf16;
    # attention scores, softmax and its mask: 5 bytes per (a, s, s, b) element.
    want = 34 * s * b * h + 5 * a * s * s * b
    expect(lab.activation_bytes_per_layer(s, b, h, a), want,
           "a layer stores s b h (34 + 5 a s/h) bytes at bf16 (Korthikanti et al. 2022)")
    expect(lab.activation_bytes_per_layer(s, b, h, a, 4), 2 * want, "fp32 doubles it")


def test_scenario_size_70b():
    got = lab.scenario_size_70b()
    psi, gpus, memory = 70e9, 16, 80e9
    states = psi * (2 + 2 + 12)
    expect(got["states_total_bytes"], states, "70B x 16 B/param of model states")
    expect(got["states_per_gpu_bytes"], states / gpus, "ZeRO-3 shards them all over 16 GPUs")
    expect(got["headroom_bytes"], memory - states / gpus, "80 GB minus the sharded states")
    per_layer = 4096 * 8192 * 34 + 5 * 64 * 4096 * 4096
    expect(got["activations_bytes"], 80 * per_layer,
           "80 layers x s b h (34 + 5 a s/h) at s=4096, b=1, h=8192, a=64")
    expect(got["activations_checkpointed_bytes"], 80 * 4096 * 8192 * 2,
           "full checkpointing keeps each layer's bf16 input only: 2 s b h per layer")
    expect(got["checkpointing_saves_factor"], per_layer / (4096 * 8192 * 2),
           "checkpointing divides the activations by (34 + 5 a s/h) / 2")
    expect(got["fits_without_checkpointing"], False,
           "70 GB of states + 520 GB of activations do not fit in 80 GB")
    expect(got["fits_with_checkpointing"], True,
           "70 GB of states + 5.4 GB of layer inputs fit in 80 GB (before buffers)")
    expect(got["recompute_extra_compute"], (1 + 2 + 1) / (1 + 2) - 1,
           "recompute runs the forward again: F + 2F backward + F = 4/3 of the compute")


@engine
def test_scenario_size_70b_states_equal_dtrain_scenario():
    report = json.loads(dtrain.run("scenario", "size-70b", "--json"))
    psi = dtrain.plan(model="llama2-70b", cluster="2x8xA100", dp=16)["model"]["params"]
    rows = report["tables"][0]["rows"]
    for stage, row in enumerate(rows):
        mine = lab.zero_memory_per_gpu(psi, 16, stage)["total"]
        expect(mine, row["total per GPU"], f"dtrain scenario size-70b: ZeRO-{stage} over 16 GPUs "
               f"holds {row['total per GPU']} B per GPU for llama2-70b's {psi} parameters")
    mine = lab.scenario_size_70b(num_params=psi)["states_per_gpu_bytes"]
    expect(mine, report["tables"][1]["rows"][0]["model states"],
           "the scenario's ZeRO-3 states on 16 GPUs")


def test_scenario_stalled_scaleout():
    got = lab.scenario_stalled_scaleout()
    psi = 1.7e9
    grads = 2 * psi
    compute = 6 * psi * 2048 / (312e12 * 0.5)
    for n in (8, 16, 32, 64):
        row = got["rows"][n]
        sent = 2 * (n - 1) / n * grads
        link = 300e9 if n <= 8 else 25e9
        expect(row["bytes_per_rank"], sent, f"a flat ring on {n} GPUs sends 2(N-1)/N x 3.4 GB")
        expect(row["allreduce_s"], sent / link,
               f"at {n} GPUs the ring runs at {'NVLink' if n <= 8 else 'InfiniBand'}'s speed")
        expect(row["compute_s"], compute, "6 Psi FLOPs per token at half of 312 TFLOP/s")
        expect(row["step_s"], compute + sent / link, "no overlap: compute then all-reduce")
        expect(row["compute_fraction"], compute / (compute + sent / link), "compute / step")
        expect(row["tokens_per_s_per_gpu"], 2048 / (compute + sent / link), "2048 tokens / step")
        expect(row["crosses_nodes"], n > 8, "8 GPUs per node")
    assert got["rows"][64]["tokens_per_s_per_gpu"] < 0.5 * got["rows"][8]["tokens_per_s_per_gpu"], \
        "crossing nodes more than halves each GPU's throughput: the scale-out stalls"
    hier = got["hierarchical"]
    inter = 2 * (8 - 1) / 8 * grads / 8  # all-reduce of a 1/8 shard over 8 nodes
    expect(hier["gpus"], 64, "the fix is shown at the largest N")
    expect(hier["inter_node_bytes_per_rank"], inter,
           "hierarchical: each GPU all-reduces only its 1/G shard across the 8 nodes")
    expect(hier["flat_over_hierarchical"], (2 * 63 / 64 * grads) / inter,
           "the flat ring's inter-node bytes over the hierarchical's (about G = 8)")
    hier_s = 2 * 7 / 8 * grads / 300e9 + inter / 25e9
    expect(hier["allreduce_s"], hier_s, "reduce-scatter + all-gather on NVLink, the shard on IB")
    expect(hier["compute_fraction"], compute / (compute + hier_s), "compute / step, hierarchical")


@engine
def test_scenario_stalled_scaleout_bytes_equal_dtrain_scenario():
    report = json.loads(dtrain.run("scenario", "stalled-scaleout", "--json"))
    psi = dtrain.plan(model="megatron-1.7b", cluster="1x8xA100", dp=8)["model"]["params"]
    got = lab.scenario_stalled_scaleout(num_params=psi)
    for row in report["tables"][0]["rows"]:
        n = int(row["GPUs"])
        expect(got["rows"][n]["bytes_per_rank"], row["bytes sent per rank"],
               f"dtrain scenario stalled-scaleout: bytes sent per rank at {n} GPUs")
    fixes = {row["all-reduce"]: row for row in report["tables"][1]["rows"]}
    expect(got["hierarchical"]["inter_node_bytes_per_rank"],
           fixes["hierarchical, one call after backward"]["inter-node bytes per rank"],
           "dtrain scenario stalled-scaleout: the hierarchical all-reduce's inter-node bytes")


def test_scenario_3d_placement():
    got = lab.scenario_3d_placement()
    bsh = 1 * 2048 * 12288 * 2  # one micro-batch's (b s, h) activation in bf16
    tp_bytes = 128 * (96 // 8) * 4 * (2 * 7 / 8 * bsh)
    pp_bytes = 128 * 2 * bsh
    expect(got["tp_bytes_per_rank"], tp_bytes,
           "TP: 4 ring all-reduces of b s h per layer, 12 layers per stage, 128 micro-batches")
    expect(got["pp_bytes_per_rank"], pp_bytes,
           "PP: one activation forward and one gradient backward per micro-batch")
    expect(got["tp_over_pp"], tp_bytes / pp_bytes, "TP moves ~42x PP's bytes")
    expect(got["tp_seconds_in_node"], tp_bytes / 300e9, "TP on NVLink")
    expect(got["tp_seconds_across_nodes"], tp_bytes / 25e9, "TP on InfiniBand")
    expect(got["pp_seconds_across_nodes"], pp_bytes / 25e9, "PP on InfiniBand")
    expect(got["tp_in_node"], True, "the axis with ~42x the bytes, on every layer's critical "
           "path, takes NVLink: TP in the node, PP across")


@engine
def test_scenario_3d_placement_bytes_equal_dtrain_scenario():
    report = json.loads(dtrain.run("scenario", "3d-placement", "--json"))
    got = lab.scenario_3d_placement()
    for row in report["tables"][0]["rows"]:
        expect(got["tp_bytes_per_rank"], row["TP bytes/rank"],
               f"dtrain scenario 3d-placement ({row['rank order']}): TP bytes per rank")
        expect(got["pp_bytes_per_rank"], row["PP bytes/rank"],
               f"dtrain scenario 3d-placement ({row['rank order']}): PP bytes per rank")


def test_scenario_gpipe_vs_1f1b():
    got = lab.scenario_gpipe_vs_1f1b()
    for m in (8, 64):
        row = got[m]
        expect(row["bubble"], 7 / (m + 7), f"P=8, M={m}: (P-1)/(M+P-1) = 7/{m + 7}")
        expect(row["bubble_of_ideal"], 7 / m, f"P=8, M={m}: idle over ideal time = 7/{m}")
        expect(row["gpipe_in_flight"], m, f"GPipe holds all M = {m} micro-batches on stage 0")
        expect(row["one_f_one_b_in_flight"], min(8, m), "1F1B holds at most P = 8 on stage 0")
        expect(row["activation_ratio"], m / min(8, m), "GPipe's activations over 1F1B's")
    assert got[64]["bubble"] < got[8]["bubble"] / 4, "M=64 shrinks the bubble below 10%"


@engine
def test_scenario_gpipe_vs_1f1b_equals_dtrain_scenario():
    report = json.loads(dtrain.run("scenario", "gpipe-vs-1f1b", "--json"))
    got = lab.scenario_gpipe_vs_1f1b()
    for row in report["tables"][0]["rows"]:
        m = int(row["M"])
        if row["schedule"] not in ("gpipe", "1f1b"):
            continue  # interleaved: beyond the lab
        expect(got[m]["bubble"], row["formula / step"], f"dtrain's {row['schedule']} at M={m}")
        expect(got[m]["bubble_of_ideal"], row["formula / ideal"], f"dtrain's bubble/ideal, M={m}")
        key = "gpipe_in_flight" if row["schedule"] == "gpipe" else "one_f_one_b_in_flight"
        expect(got[m][key], row["in flight (stage 0)"],
               f"dtrain's {row['schedule']} holds {row['in flight (stage 0)']} at M={m}")


def test_scenario_ddp_vs_fsdp():
    got = lab.scenario_ddp_vs_fsdp()
    psi, n = 13e9, 8
    expect(got["ddp_states_per_gpu_bytes"], 16 * psi, "DDP replicates 16 B/param: 208 GB")
    expect(got["fsdp_states_per_gpu_bytes"], 16 * psi / n, "FSDP shards them 1/8: 26 GB")
    expect(got["ddp_fits"], False, "208 GB of states exceed 80 GB")
    expect(got["fsdp_fits"], True, "26 GB of states fit in 80 GB")
    ddp = 2 * (n - 1) / n * psi * 2
    expect(got["ddp_bytes_per_rank"], ddp, "DDP: one ring all-reduce of the bf16 gradients")
    expect(got["fsdp_bytes_per_rank"], 1.5 * ddp,
           "FSDP: all-gather forward, all-gather backward, reduce-scatter: 3 (N-1)/N Psi")
    expect(got["fsdp_over_ddp"], 1.5, "FSDP pays 1.5x DDP's bytes")
    expect(got["ddp_bytes_accumulating"], ddp,
           "DDP all-reduces once per step however many micro-batches it accumulates")
    expect(got["fsdp_bytes_accumulating"], 8 * 1.5 * ddp,
           "FSDP gathers and reduce-scatters again for each of the 8 micro-batches")


@engine
def test_scenario_ddp_vs_fsdp_equals_dtrain_scenario():
    report = json.loads(dtrain.run("scenario", "ddp-vs-fsdp", "--json"))
    psi = dtrain.plan(model="llama2-13b", cluster="1x8xA100", dp=8)["model"]["params"]
    checked = 0
    for row in report["tables"][0]["rows"]:
        gpus, mbs = int(row["GPUs"]), int(row["micro-batches"])
        if gpus != 8 or row["sharding"] not in ("DDP (none)", "FSDP (ZeRO-3)"):
            continue
        got = lab.scenario_ddp_vs_fsdp(num_params=psi, gpus=gpus, microbatches=mbs)
        fsdp = row["sharding"].startswith("FSDP")
        states = got["fsdp_states_per_gpu_bytes" if fsdp else "ddp_states_per_gpu_bytes"]
        sent = got["fsdp_bytes_accumulating" if fsdp else "ddp_bytes_accumulating"]
        expect(states, row["model states"], f"dtrain's {row['sharding']} states, M={mbs}")
        expect(sent, row["bytes sent/rank"], f"dtrain's {row['sharding']} bytes/rank, M={mbs}",
               rel=1e-6)
        checked += 1
    assert checked == 4, "the scenario has DDP and FSDP rows at 8 GPUs with M = 1 and 8"
