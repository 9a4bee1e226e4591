"""The lab, solved: read this after your lab.py is green (or when you are stuck on one exercise).

Every function has the same name, arguments and return value as in lab.py. The comments are the
reasoning a teacher would write on the whiteboard; the numbers in the scenarios are derived here
from first principles (parameter counts, bytes per parameter, link bandwidths), not copied from
dtrain's planner, so test_lab.py can set them beside what the engine computes.

Conventions (the same as lab.py's): a "rank" is an element of a Python list; a collective takes a
list of NumPy arrays (one per rank) and returns a list (one per rank) plus a stats dict
{"steps": [per rank], "bytes_sent": [per rank]}. A step is one round in which a rank sends and/or
receives one message; bytes are the NumPy buffers' nbytes, so float32 data gives 4 bytes/element.
"""

import numpy as np

# ==================================================================================================
# 1. Collectives over simulated ranks
# ==================================================================================================


def _new_stats(n):
    return {"steps": [0] * n, "bytes_sent": [0] * n}


def ring_reduce_scatter(inputs):
    """Ring reduce-scatter: rank r ends with the sum over ranks of chunk r (np.array_split(x, N)).

    Each rank cuts its vector into N chunks. In step k (k = 0..N-2) rank r sends its running sum
    of chunk (r - k - 1) mod N to its right neighbour r+1, which adds it into its own copy of that
    chunk. A chunk c starts at rank c+1, picks up one rank's contribution per hop, and after N-1
    hops lands, complete, on rank c. So: N-1 steps, and every rank sends N-1 chunks of S/N bytes,
    (N-1)/N * S in all, whatever N is: the bandwidth-optimal volume.
    """
    n = len(inputs)
    chunks = [[c.copy() for c in np.array_split(np.asarray(x), n)] for x in inputs]
    stats = _new_stats(n)
    for k in range(n - 1):
        # All sends of a step happen "at once": take the messages first, then deliver them.
        messages = []
        for r in range(n):
            c = (r - k - 1) % n
            messages.append(((r + 1) % n, c, chunks[r][c].copy()))
            stats["steps"][r] += 1
            stats["bytes_sent"][r] += chunks[r][c].nbytes
        for dest, c, payload in messages:
            chunks[dest][c] += payload
    return [chunks[r][r] for r in range(n)], stats


def ring_all_gather(shards):
    """Ring all-gather: rank r starts with shard r, every rank ends with all N shards concatenated.

    In step k rank r forwards shard (r - k) mod N (its own at k=0, then the one it just received)
    to rank r+1. After N-1 steps every shard has visited every rank: N-1 steps, (N-1) shards of
    S/N bytes sent per rank, where S is the gathered size.
    """
    n = len(shards)
    have = [[None] * n for _ in range(n)]
    for r in range(n):
        have[r][r] = np.asarray(shards[r]).copy()
    stats = _new_stats(n)
    for k in range(n - 1):
        messages = []
        for r in range(n):
            c = (r - k) % n
            messages.append(((r + 1) % n, c, have[r][c]))
            stats["steps"][r] += 1
            stats["bytes_sent"][r] += have[r][c].nbytes
        for dest, c, payload in messages:
            have[dest][c] = payload.copy()
    return [np.concatenate(h) for h in have], stats


def ring_all_reduce(inputs):
    """Ring all-reduce = ring reduce-scatter, then ring all-gather of the reduced chunks.

    Steps: (N-1) + (N-1) = 2(N-1). Bytes sent per rank: (N-1)/N * S twice = 2 S (N-1)/N, which
    tends to 2 S however many ranks there are: that is why the ring scales in bandwidth.
    """
    n = len(inputs)
    if n == 1:
        return [np.asarray(inputs[0]).copy()], _new_stats(1)
    shards, first = ring_reduce_scatter(inputs)
    outputs, second = ring_all_gather(shards)
    stats = {key: [a + b for a, b in zip(first[key], second[key])] for key in first}
    return outputs, stats


def naive_all_reduce(inputs, root=0):
    """Naive all-reduce through one root: everyone sends S to the root, the root sums and sends
    the S-byte result back to everyone.

    The root does 2(N-1) steps and sends (N-1) * S bytes: it grows with N, so the root's link is
    the bottleneck. Every other rank: 2 steps (one send, one receive) and S bytes sent.
    """
    n = len(inputs)
    stats = _new_stats(n)
    total = np.asarray(inputs[root]).copy()
    for r in range(n):
        if r == root:
            continue
        total += inputs[r]  # r -> root
        stats["steps"][r] += 1
        stats["bytes_sent"][r] += np.asarray(inputs[r]).nbytes
        stats["steps"][root] += 1
    for r in range(n):
        if r == root:
            continue
        stats["steps"][root] += 1  # root -> r
        stats["bytes_sent"][root] += total.nbytes
        stats["steps"][r] += 1
    return [total.copy() for _ in range(n)], stats


def ring_all_reduce_cost(n_ranks, size_bytes):
    """Closed form of the ring all-reduce: (steps, bytes sent per rank) = (2(N-1), 2 S (N-1)/N)."""
    return 2 * (n_ranks - 1), 2 * size_bytes * (n_ranks - 1) / n_ranks


# ==================================================================================================
# 2. Data parallelism on a 2-layer MLP
# ==================================================================================================


def mlp_forward_backward(params, x, y):
    """Loss = mean over the B rows of 0.5 * ||relu(x W1 + b1) W2 + b2 - y||^2, and its gradients.

    The backward is the chain rule written out, layer by layer, in reverse.
    """
    w1, b1, w2, b2 = params["w1"], params["b1"], params["w2"], params["b2"]
    batch = x.shape[0]
    pre = x @ w1 + b1  # (B, H)
    hidden = np.maximum(pre, 0.0)  # (B, H)
    out = hidden @ w2 + b2  # (B, O)
    diff = out - y
    loss = 0.5 * np.sum(diff * diff) / batch
    dout = diff / batch  # dL/dout: the 1/B of the mean is here
    dw2 = hidden.T @ dout
    db2 = dout.sum(axis=0)
    dhidden = dout @ w2.T
    dpre = dhidden * (pre > 0)  # relu passes the gradient where its input was positive
    dw1 = x.T @ dpre
    db1 = dpre.sum(axis=0)
    return loss, {"w1": dw1, "b1": db1, "w2": dw2, "b2": db2}


def data_parallel_gradients(params, x, y, n_ranks):
    """Split the batch into n_ranks equal shards, run mlp_forward_backward on each "rank", then
    all-reduce (ring_all_reduce) the flattened gradients and divide by N.

    Why it equals the full batch: the loss is a mean over rows, so the full-batch gradient is
    (1/B) sum over rows; with N equal shards of B/N rows, each rank's gradient is (N/B) times its
    rows' sum, and the average over ranks is (1/N)(N/B) sum over all rows: the same number.
    Returns one gradient dict per rank (all equal after the all-reduce) and the all-reduce stats.
    """
    if x.shape[0] % n_ranks:
        raise ValueError(f"batch {x.shape[0]} does not split into {n_ranks} equal shards")
    names = list(params)
    flat = []
    for xs, ys in zip(np.array_split(x, n_ranks), np.array_split(y, n_ranks)):
        _, grads = mlp_forward_backward(params, xs, ys)
        flat.append(np.concatenate([grads[k].ravel() for k in names]))
    summed, stats = ring_all_reduce(flat)
    per_rank = []
    for vector in summed:
        vector = vector / n_ranks
        grads, offset = {}, 0
        for k in names:
            size = params[k].size
            grads[k] = vector[offset:offset + size].reshape(params[k].shape)
            offset += size
        per_rank.append(grads)
    return per_rank, stats


def sgd_update(params, grads, lr):
    """One plain SGD step, p - lr * g, returned as a new dict (params are not modified)."""
    return {k: params[k] - lr * grads[k] for k in params}


# ==================================================================================================
# 3. Tensor parallelism (Megatron): column- and row-parallel linear layers
# ==================================================================================================


def column_parallel_forward(x, weight, bias, tp):
    """Column-parallel linear: rank r holds columns r of W and of b (np.array_split(W, tp, axis=1))
    and computes its slice of the output, x @ W_r + b_r. Every rank needs the whole x; nothing is
    communicated forward. Concatenating the ranks' outputs along the last axis is x @ W + b."""
    w_shards = np.array_split(weight, tp, axis=1)
    b_shards = np.array_split(bias, tp)
    return [x @ w + b for w, b in zip(w_shards, b_shards)]


def row_parallel_forward(x_shards, weight, bias, tp):
    """Row-parallel linear: rank r holds rows r of W and the matching slice of the input's last
    axis; x_r @ W_r is a partial sum, and the output x @ W = sum_r x_r @ W_r needs an all-reduce
    (ring_all_reduce here). The bias is added once, after the sum. Returns (outputs per rank,
    all-reduce stats)."""
    w_shards = np.array_split(weight, tp, axis=0)
    partial = [xs @ w for xs, w in zip(x_shards, w_shards)]
    shape = partial[0].shape
    summed, stats = ring_all_reduce([p.ravel() for p in partial])
    return [s.reshape(shape) + bias for s in summed], stats


def tp_mlp_forward(x, w1, b1, w2, b2, tp):
    """Megatron's MLP: column-parallel W1, ReLU on each rank's own columns, row-parallel W2.

    The nonlinearity is elementwise, so each rank applies it to its slice with no communication;
    the column slices are exactly the row slices W2 needs. One all-reduce per forward, after W2.
    Returns (outputs per rank, stats of that all-reduce)."""
    hidden = [np.maximum(h, 0.0) for h in column_parallel_forward(x, w1, b1, tp)]
    return row_parallel_forward(hidden, w2, b2, tp)


def tp_communication():
    """Which pass of which layer needs an all-reduce across the TP group (True) and which not.

    column forward: no, each rank computes its own output columns from the full input.
    row forward: yes, the ranks hold partial sums of the same output (g in Megatron).
    column backward: yes, dL/dx = sum_r dL/dy_r W_r^T, a partial sum per rank (f in Megatron).
    row backward: no, dL/dx_r = dL/dy W_r^T needs only the full dL/dy every rank already has.
    """
    return {"column_forward": False, "row_forward": True,
            "column_backward": True, "row_backward": False}


def tp_allreduce_bytes(tokens, hidden, tp, bytes_per_element=2):
    """Bytes one rank sends in one TP all-reduce of a (tokens, hidden) activation (ring):
    2 (t-1)/t * tokens * hidden * bytes_per_element."""
    return 2 * (tp - 1) / tp * tokens * hidden * bytes_per_element


def tp_bytes_per_layer(tokens, hidden, tp, bytes_per_element=2):
    """Bytes one rank sends per transformer layer per micro-batch: attention and MLP each have
    one all-reduce forward (after their row-parallel layer) and one backward (before their
    column-parallel layer): 4 all-reduces."""
    return 4 * tp_allreduce_bytes(tokens, hidden, tp, bytes_per_element)


# ==================================================================================================
# 4. Pipeline parallelism: the bubble and a schedule simulator
# ==================================================================================================


def pipeline_bubble(stages, microbatches):
    """Share of the step each stage idles: (P-1)/(M+P-1).

    With equal forward and backward time per micro-batch, a stage is busy for M forwards and M
    backwards; the first forward reaches the last stage after P-1 slots and the last backward
    leaves the first stage P-1 slots after the last stage finishes it: the step is M+P-1 slot
    pairs long, P-1 of them idle."""
    return (stages - 1) / (microbatches + stages - 1)


def microbatches_for_bubble(stages, max_bubble):
    """The smallest M with (P-1)/(M+P-1) <= max_bubble: M >= (P-1)(1-b)/b, rounded up."""
    m = max(1, int(np.ceil((stages - 1) * (1 - max_bubble) / max_bubble - 1e-12)))
    while pipeline_bubble(stages, m) > max_bubble:  # guard against rounding
        m += 1
    return m


def _stage_order(schedule, stages, microbatches, stage):
    if schedule == "gpipe":
        # Every forward, then every backward (in the same order).
        return [("F", m) for m in range(microbatches)] + [("B", m) for m in range(microbatches)]
    if schedule == "1f1b":
        # Warm up with P-s-1 forwards, then alternate one forward and one backward, then drain.
        warmup = min(stages - stage - 1, microbatches)
        order = [("F", m) for m in range(warmup)]
        next_f, next_b = warmup, 0
        while next_f < microbatches:
            order.append(("F", next_f))
            next_f += 1
            order.append(("B", next_b))
            next_b += 1
        order += [("B", m) for m in range(next_b, microbatches)]
        return order
    raise ValueError(f"schedule must be 'gpipe' or '1f1b', not {schedule!r}")


def simulate_pipeline(schedule, stages, microbatches):
    """Simulate a schedule with every forward and every backward taking one time unit.

    Each stage runs its own fixed order of operations; an operation starts when its stage is
    free and its input is there: F(s, m) after F(s-1, m) ends, B(s, m) after B(s+1, m) ends (and
    after F(s, m)). Returns {"stages": [[(start, "F" or "B", microbatch), ...] per stage in
    execution order], "makespan": time the last operation ends}.
    """
    orders = [_stage_order(schedule, stages, microbatches, s) for s in range(stages)]
    end = {}  # (kind, stage, mb) -> end time
    timeline = [[] for _ in range(stages)]
    free = [0] * stages
    position = [0] * stages
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(stages):
            if position[s] == len(orders[s]):
                continue
            kind, m = orders[s][position[s]]
            if kind == "F":
                deps = [("F", s - 1, m)] if s > 0 else []
            else:
                deps = [("F", s, m)] + ([("B", s + 1, m)] if s < stages - 1 else [])
            if any(d not in end for d in deps):
                continue
            start = max([free[s]] + [end[d] for d in deps])
            end[(kind, s, m)] = start + 1
            free[s] = start + 1
            timeline[s].append((start, kind, m))
            position[s] += 1
            remaining -= 1
            progressed = True
        if not progressed:
            raise RuntimeError("the schedule deadlocks")
    return {"stages": timeline, "makespan": max(free)}


def peak_in_flight(timeline):
    """Per stage, the most micro-batches whose forward has run and whose backward has not: the
    activations the stage must hold at once. GPipe: M on every stage; 1F1B: P-s on stage s."""
    peaks = []
    for ops in timeline["stages"]:
        live = peak = 0
        for _, kind, _ in sorted(ops):
            live += 1 if kind == "F" else -1
            peak = max(peak, live)
        peaks.append(peak)
    return peaks


def timeline_bubble(timeline):
    """Idle share of the stages' time: 1 - busy units / (P * makespan)."""
    busy = sum(len(ops) for ops in timeline["stages"])
    return 1 - busy / (len(timeline["stages"]) * timeline["makespan"])


# ==================================================================================================
# 5. ZeRO: memory per GPU and communication per stage
# ==================================================================================================


def zero_memory_per_gpu(num_params, dp, stage, param_bytes=2, grad_bytes=2, optimizer_bytes=12):
    """Model-state bytes per GPU at ZeRO stage 0-3 over dp data-parallel GPUs.

    Mixed-precision Adam keeps 2 (bf16 weights) + 2 (bf16 grads) + 12 (fp32 master weights, m, v)
    bytes per parameter. Stage 1 shards the optimizer state over the dp ranks, stage 2 the
    gradients too, stage 3 the weights too; what is sharded costs 1/dp of itself per GPU."""
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO stage must be 0, 1, 2 or 3, not {stage}")
    params = num_params * param_bytes / (dp if stage >= 3 else 1)
    grads = num_params * grad_bytes / (dp if stage >= 2 else 1)
    optimizer = num_params * optimizer_bytes / (dp if stage >= 1 else 1)
    return {"params": params, "grads": grads, "optimizer": optimizer,
            "total": params + grads + optimizer}


def zero_comm_bytes_per_gpu(num_params, dp, stage, grad_bytes=2, param_bytes=2):
    """Bytes one GPU sends per step in the data-parallel syncs (ring collectives).

    Stage 0: all-reduce the gradients, 2 (N-1)/N * Psi * grad_bytes.
    Stages 1-2: reduce-scatter the gradients ((N-1)/N * Psi * grad_bytes) so each rank updates
    its shard, then all-gather the updated weights ((N-1)/N * Psi * param_bytes): the same
    volume as the all-reduce when both are 2 bytes.
    Stage 3: the weights are gathered twice (forward and backward) and the gradients
    reduce-scattered once: 3 (N-1)/N * Psi elements, 1.5x the all-reduce."""
    share = (dp - 1) / dp * num_params
    reduce_scatter = share * grad_bytes
    gather = share * param_bytes
    if stage == 0:
        return 2 * share * grad_bytes
    if stage in (1, 2):
        return reduce_scatter + gather
    if stage == 3:
        return reduce_scatter + 2 * gather
    raise ValueError(f"ZeRO stage must be 0, 1, 2 or 3, not {stage}")


# ==================================================================================================
# 6. The five scenarios
# ==================================================================================================


def activation_bytes_per_layer(seq, micro_batch, hidden, heads, bytes_per_element=2):
    """Korthikanti et al. (2022): a GPT layer stores s b h (34 + 5 a s / h) bytes of activations in
    16-bit precision without recompute: 34 s b h for the linear layers' inputs, GeLU, dropout
    masks and norms, and 5 a s^2 b for the attention scores, softmax and its dropout mask."""
    per_element = bytes_per_element / 2  # the 34 and 5 assume 2-byte activations
    return seq * micro_batch * hidden * (34 + 5 * heads * seq / hidden) * per_element


def scenario_size_70b(num_params=70e9, gpus=16, gpu_memory=80e9, layers=80, hidden=8192,
                      heads=64, seq=4096, micro_batch=1):
    """70B on 16 x 80 GB with ZeRO-3: do the model states fit, what do activations add, and what
    does full activation checkpointing (recompute) buy?"""
    # 16 bytes per parameter: 70e9 * 16 = 1.12 TB of states, 14 GPUs' worth before activations.
    states_total = zero_memory_per_gpu(num_params, 1, 0)["total"]
    # ZeRO-3 shards all of it: 1.12 TB / 16 = 70 GB per GPU, leaving 10 GB of an 80 GB GPU.
    states_per_gpu = zero_memory_per_gpu(num_params, gpus, 3)["total"]
    headroom = gpu_memory - states_per_gpu
    # Without recompute every layer keeps s b h (34 + 5 a s/h) bytes: 4096*8192*(34+160) = 6.5 GB
    # per layer, 521 GB for 80 layers: 50x the headroom (ZeRO shards states, not activations).
    act_none = layers * activation_bytes_per_layer(seq, micro_batch, hidden, heads)
    # Full checkpointing keeps only each layer's 2-byte input, 2 s b h = 67 MB per layer, 5.4 GB
    # in all, and recomputes the rest during the backward.
    act_full = layers * 2 * seq * micro_batch * hidden
    # The price: the forward runs twice. With backward = 2 forwards, a step goes from 3 forward
    # units to 4: one third more compute. (dtrain's planner adds ZeRO-3's gathered layers and the
    # recomputed layer's working set on top; `dtrain scenario size-70b` shows they tip 16 GPUs
    # just over 80 GB, so a real run takes 32 GPUs or adds tensor parallelism.)
    return {
        "states_total_bytes": states_total,
        "states_per_gpu_bytes": states_per_gpu,
        "headroom_bytes": headroom,
        "activations_bytes": act_none,
        "activations_checkpointed_bytes": act_full,
        "checkpointing_saves_factor": act_none / act_full,
        "fits_without_checkpointing": states_per_gpu + act_none <= gpu_memory,
        "fits_with_checkpointing": states_per_gpu + act_full <= gpu_memory,
        "recompute_extra_compute": 1 / 3,
    }


def scenario_stalled_scaleout(num_params=1.7e9, gpu_counts=(8, 16, 32, 64), gpus_per_node=8,
                              intra_bandwidth=300e9, inter_bandwidth=25e9, tokens_per_gpu=2048,
                              peak_flops=312e12, mfu=0.5, grad_bytes=2):
    """Plain data parallelism (one flat ring all-reduce after the backward) from 8 to 64 GPUs.

    Returns {"rows": {N: {...}}, "hierarchical": {...} at the largest N}. Times count bandwidth
    only (no latency), which is enough to see the stall."""
    grads = num_params * grad_bytes
    # Weak scaling: each GPU's compute does not change with N: 6 Psi FLOPs per token (forward 2,
    # backward 4) at mfu of peak. 1.7e9 params, 2048 tokens: 134 ms at 50% of 312 TFLOP/s.
    compute_s = 6 * num_params * tokens_per_gpu / (peak_flops * mfu)
    rows = {}
    for n in gpu_counts:
        _, sent = ring_all_reduce_cost(n, grads)
        # A ring is as fast as its slowest hop: once it spans two nodes, some hop is InfiniBand
        # (25 GB/s per GPU), 12x slower than NVLink (300 GB/s), though the bytes barely change.
        link = intra_bandwidth if n <= gpus_per_node else inter_bandwidth
        allreduce_s = sent / link
        step_s = compute_s + allreduce_s
        rows[n] = {"bytes_per_rank": sent, "allreduce_s": allreduce_s, "compute_s": compute_s,
                   "step_s": step_s, "compute_fraction": compute_s / step_s,
                   "tokens_per_s_per_gpu": tokens_per_gpu / step_s,
                   "crosses_nodes": n > gpus_per_node}
    # The fix at the largest N: reduce-scatter inside the node (NVLink), all-reduce the 1/G shard
    # across the n/G nodes (InfiniBand), all-gather inside the node: the inter-node bytes drop
    # from 2 (N-1)/N S to 2 (n-1)/n S/G, about G times fewer.
    n = max(gpu_counts)
    nodes = n // gpus_per_node
    g = gpus_per_node
    inter_bytes = 2 * (nodes - 1) / nodes * grads / g
    hier_s = (2 * (g - 1) / g * grads / intra_bandwidth  # reduce-scatter + all-gather in node
              + inter_bytes / inter_bandwidth)
    return {"rows": rows,
            "hierarchical": {"gpus": n, "inter_node_bytes_per_rank": inter_bytes,
                             "flat_over_hierarchical": rows[n]["bytes_per_rank"] / inter_bytes,
                             "allreduce_s": hier_s,
                             "compute_fraction": compute_s / (compute_s + hier_s)}}


def scenario_3d_placement(layers=96, hidden=12288, seq=2048, micro_batch=1, microbatches=128,
                          tp=8, pp=8, bytes_per_element=2, intra_bandwidth=300e9,
                          inter_bandwidth=25e9):
    """GPT-3 175B on 8 nodes x 8 GPUs with TP=8 and PP=8: why TP goes inside the node.

    Bytes per rank per step: TP does 4 all-reduces of (b s, h) per layer per micro-batch over its
    L/P layers; PP sends one activation forward and one gradient backward of (b s, h) per
    micro-batch. Times are bandwidth only."""
    tokens = seq * micro_batch
    # 4 * 2 * 7/8 * 2048 * 12288 * 2 B = 352 MB per layer per micro-batch, x 12 layers x 128.
    tp_bytes = tp_bytes_per_layer(tokens, hidden, tp, bytes_per_element) * (layers // pp) \
        * microbatches
    # 2 * 2048 * 12288 * 2 B = 101 MB per micro-batch, x 128.
    pp_bytes = 2 * tokens * hidden * bytes_per_element * microbatches
    # One axis gets NVLink, the other InfiniBand: give NVLink to the one whose bytes would cost
    # more on the slow link (TP: ~40x the bytes, and on every layer's critical path).
    tp_saves = tp_bytes / inter_bandwidth - tp_bytes / intra_bandwidth
    pp_saves = pp_bytes / inter_bandwidth - pp_bytes / intra_bandwidth
    return {
        "tp_bytes_per_rank": tp_bytes,
        "pp_bytes_per_rank": pp_bytes,
        "tp_over_pp": tp_bytes / pp_bytes,
        "tp_seconds_in_node": tp_bytes / intra_bandwidth,
        "tp_seconds_across_nodes": tp_bytes / inter_bandwidth,
        "pp_seconds_across_nodes": pp_bytes / inter_bandwidth,
        "tp_in_node": tp_saves > pp_saves,
    }


def scenario_gpipe_vs_1f1b(stages=8, microbatch_counts=(8, 64)):
    """GPipe vs 1F1B at P=8 with M=8 and M=64: the same bubble, different memory.

    Returns {M: {"bubble", "bubble_of_ideal", "gpipe_in_flight", "one_f_one_b_in_flight",
    "activation_ratio"}}, in-flight counts on stage 0 (the stage that holds the most)."""
    out = {}
    for m in microbatch_counts:
        gpipe = peak_in_flight(simulate_pipeline("gpipe", stages, m))[0]
        one_f_one_b = peak_in_flight(simulate_pipeline("1f1b", stages, m))[0]
        out[m] = {
            # 7/15 = 46.7% at M=8, 7/71 = 9.9% at M=64: for both schedules.
            "bubble": pipeline_bubble(stages, m),
            # The same idle time over the ideal (bubble-free) time M: (P-1)/M = 87.5% and 10.9%.
            "bubble_of_ideal": (stages - 1) / m,
            # GPipe holds every micro-batch's activations before the first backward: M.
            "gpipe_in_flight": gpipe,
            # 1F1B starts backwards after P forwards on stage 0 and never holds more: min(P, M).
            "one_f_one_b_in_flight": one_f_one_b,
            "activation_ratio": gpipe / one_f_one_b,
        }
    return out


def scenario_ddp_vs_fsdp(num_params=13e9, gpus=8, gpu_memory=80e9, microbatches=8,
                         bytes_per_element=2):
    """DDP vs FSDP (ZeRO-3) for a 13B model on one node of 8 GPUs: memory and its price."""
    ddp_states = zero_memory_per_gpu(num_params, gpus, 0)["total"]  # 16 * 13e9 = 208 GB
    fsdp_states = zero_memory_per_gpu(num_params, gpus, 3)["total"]  # 208 GB / 8 = 26 GB
    ddp_bytes = zero_comm_bytes_per_gpu(num_params, gpus, 0, bytes_per_element, bytes_per_element)
    fsdp_bytes = zero_comm_bytes_per_gpu(num_params, gpus, 3, bytes_per_element,
                                         bytes_per_element)
    return {
        "ddp_states_per_gpu_bytes": ddp_states,
        "fsdp_states_per_gpu_bytes": fsdp_states,
        "ddp_fits": ddp_states <= gpu_memory,
        "fsdp_fits": fsdp_states <= gpu_memory,
        "ddp_bytes_per_rank": ddp_bytes,
        "fsdp_bytes_per_rank": fsdp_bytes,
        "fsdp_over_ddp": fsdp_bytes / ddp_bytes,  # 3 (N-1)/N Psi over 2 (N-1)/N Psi
        # Accumulating M micro-batches: DDP all-reduces once per step (after the last
        # micro-batch); FSDP has freed the weights after each use, so it gathers them again
        # (forward and backward) and reduce-scatters each micro-batch's gradients: M times.
        "ddp_bytes_accumulating": ddp_bytes,
        "fsdp_bytes_accumulating": fsdp_bytes * microbatches,
    }
