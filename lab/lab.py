"""The lab: distributed training on a whiteboard, in NumPy. Make `pytest test_lab.py` green.

Every exercise below is a function whose docstring states the task, the inputs and what to
return; its body raises NotImplementedError until you write it. Work through them in order (the
later ones call the earlier ones); `README.md` beside this file says how each maps to a dtrain
command, and `solution.py` is the worked answer, to read after (or when stuck).

Conventions: a "rank" is an element of a Python list; a collective takes a list of NumPy arrays
(one per rank) and returns a list (one per rank) plus a stats dict
{"steps": [per rank], "bytes_sent": [per rank]}. A step is one round in which a rank sends and/or
receives one message; count bytes as the NumPy buffers' nbytes (float32: 4 bytes per element).
"""

import numpy as np  # noqa: F401  (you will need it)

# ==================================================================================================
# 1. Collectives over simulated ranks
# ==================================================================================================


def ring_reduce_scatter(inputs):
    """Ring reduce-scatter.

    inputs: N arrays of the same 1-D shape, one per rank (do not modify them).
    Cut each into N chunks with np.array_split(x, N). Rank r ends holding the sum over all ranks
    of chunk r. Only neighbours talk: in each step every rank sends one chunk to rank (r+1) % N,
    which adds it into its own copy of that chunk. Count one step per rank per round and the
    nbytes of every chunk a rank sends.
    Returns (outputs, stats): outputs[r] is the reduced chunk r.
    Think: how many rounds until a chunk has passed through every rank?
    """
    raise NotImplementedError("ring_reduce_scatter: exercise 1.1")


def ring_all_gather(shards):
    """Ring all-gather.

    shards: N 1-D arrays, shard r on rank r.
    Every rank ends with np.concatenate(shards); in each step every rank forwards one shard to
    rank (r+1) % N (its own first, then the one it just received).
    Returns (outputs, stats) with outputs[r] the full concatenation on rank r.
    """
    raise NotImplementedError("ring_all_gather: exercise 1.2")


def ring_all_reduce(inputs):
    """Ring all-reduce built from your ring_reduce_scatter and ring_all_gather.

    inputs: N 1-D arrays. Every rank ends with their elementwise sum.
    Returns (outputs, stats), the stats of both phases added up per rank.
    Derive: steps and bytes sent per rank for N ranks and S bytes. (One rank: nothing to send.)
    """
    raise NotImplementedError("ring_all_reduce: exercise 1.3")


def naive_all_reduce(inputs, root=0):
    """Naive all-reduce through one root, for contrast.

    Every other rank sends its whole array to root (one step each side), root sums, then sends
    the whole result to every other rank (one step each side). Returns (outputs, stats).
    Compare root's bytes sent with a ring's as N grows.
    """
    raise NotImplementedError("naive_all_reduce: exercise 1.4")


def ring_all_reduce_cost(n_ranks, size_bytes):
    """Closed form of the ring all-reduce on n_ranks ranks of a size_bytes buffer.

    Returns (steps, bytes sent per rank), derived from reduce-scatter + all-gather.
    """
    raise NotImplementedError("ring_all_reduce_cost: exercise 1.5")


# ==================================================================================================
# 2. Data parallelism on a 2-layer MLP
# ==================================================================================================


def mlp_forward_backward(params, x, y):
    """Forward and backward of a 2-layer MLP, written out by hand.

    params: {"w1": (D, H), "b1": (H,), "w2": (H, O), "b2": (O,)}; x: (B, D); y: (B, O).
    out = relu(x @ w1 + b1) @ w2 + b2; loss = mean over the B rows of 0.5 * ||out - y||^2.
    Returns (loss, grads) with grads a dict of the same keys and shapes as params.
    """
    raise NotImplementedError("mlp_forward_backward: exercise 2.1")


def data_parallel_gradients(params, x, y, n_ranks):
    """Data parallelism: the averaged gradient over N shards.

    Split x and y into n_ranks equal shards along rows (np.array_split; raise ValueError if B
    does not divide), compute each "rank"'s gradients with mlp_forward_backward, all-reduce the
    flattened gradients with your ring_all_reduce and divide by N.
    Returns (per_rank, stats): per_rank[r] is rank r's gradient dict (same keys/shapes as params),
    stats the all-reduce's. Convince yourself it equals the full-batch gradient.
    """
    raise NotImplementedError("data_parallel_gradients: exercise 2.2")


def sgd_update(params, grads, lr):
    """One SGD step: returns a new dict {k: params[k] - lr * grads[k]} (do not modify params)."""
    raise NotImplementedError("sgd_update: exercise 2.3")


# ==================================================================================================
# 3. Tensor parallelism (Megatron): column- and row-parallel linear layers
# ==================================================================================================


def column_parallel_forward(x, weight, bias, tp):
    """Column-parallel linear layer over tp ranks.

    x: (B, D) on every rank; weight: (D, K); bias: (K,). Rank r holds
    np.array_split(weight, tp, axis=1)[r] and the matching slice of bias.
    Returns the list of per-rank outputs (B, K_r); concatenated they must be x @ weight + bias.
    """
    raise NotImplementedError("column_parallel_forward: exercise 3.1")


def row_parallel_forward(x_shards, weight, bias, tp):
    """Row-parallel linear layer over tp ranks.

    x_shards[r]: (B, D_r), rank r's slice of the input's last axis; weight: (D, K), rank r holds
    np.array_split(weight, tp, axis=0)[r]; bias: (K,), added once to the final sum.
    Use your ring_all_reduce where the ranks must combine their work.
    Returns (outputs, stats): outputs[r] is the full (B, K) result on rank r.
    """
    raise NotImplementedError("row_parallel_forward: exercise 3.2")


def tp_mlp_forward(x, w1, b1, w2, b2, tp):
    """Megatron's MLP: column-parallel (w1, b1), ReLU, row-parallel (w2, b2).

    Returns (outputs, stats) as row_parallel_forward does; outputs[r] must equal
    relu(x @ w1 + b1) @ w2 + b2 on every rank. How many all-reduces does the forward need?
    """
    raise NotImplementedError("tp_mlp_forward: exercise 3.3")


def tp_communication():
    """Which pass needs an all-reduce across the TP group?

    Returns {"column_forward": bool, "row_forward": bool, "column_backward": bool,
    "row_backward": bool}: True where the ranks hold partial sums that must be added.
    """
    raise NotImplementedError("tp_communication: exercise 3.4")


def tp_allreduce_bytes(tokens, hidden, tp, bytes_per_element=2):
    """Bytes one rank sends in one ring all-reduce of a (tokens, hidden) activation over tp
    ranks."""
    raise NotImplementedError("tp_allreduce_bytes: exercise 3.5")


def tp_bytes_per_layer(tokens, hidden, tp, bytes_per_element=2):
    """Bytes one rank sends per transformer layer (attention + MLP, forward + backward) per
    micro-batch of `tokens` tokens. Count the all-reduces from tp_communication."""
    raise NotImplementedError("tp_bytes_per_layer: exercise 3.6")


# ==================================================================================================
# 4. Pipeline parallelism: the bubble and a schedule simulator
# ==================================================================================================


def pipeline_bubble(stages, microbatches):
    """Share of a step each of P stages sits idle with M micro-batches (forward and backward of
    a micro-batch take equal time on every stage). Returns a fraction in [0, 1)."""
    raise NotImplementedError("pipeline_bubble: exercise 4.1")


def microbatches_for_bubble(stages, max_bubble):
    """The smallest number of micro-batches M whose bubble is at most max_bubble."""
    raise NotImplementedError("microbatches_for_bubble: exercise 4.2")


def simulate_pipeline(schedule, stages, microbatches):
    """Simulate "gpipe" or "1f1b" on P stages with M micro-batches; every forward (F) and every
    backward (B) takes one time unit.

    Each stage runs its operations in the schedule's order: GPipe all F then all B; 1F1B first
    P-s-1 forwards on stage s (warm-up), then one F and one B alternately, then the remaining B.
    An operation starts when its stage is free and F(s-1, m) (for F) or B(s+1, m) and F(s, m)
    (for B) have ended. Raise ValueError for another schedule name.
    Returns {"stages": [[(start, "F" or "B", microbatch), ...] per stage, in execution order],
    "makespan": the time the last operation ends}.
    """
    raise NotImplementedError("simulate_pipeline: exercise 4.3")


def peak_in_flight(timeline):
    """Per stage, the most micro-batches whose F has run and whose B has not (activations held at
    once), from a simulate_pipeline result. Returns a list of P ints."""
    raise NotImplementedError("peak_in_flight: exercise 4.4")


def timeline_bubble(timeline):
    """The idle share of a simulate_pipeline result: 1 - busy time / (P * makespan)."""
    raise NotImplementedError("timeline_bubble: exercise 4.5")


# ==================================================================================================
# 5. ZeRO: memory per GPU and communication per stage
# ==================================================================================================


def zero_memory_per_gpu(num_params, dp, stage, param_bytes=2, grad_bytes=2, optimizer_bytes=12):
    """Model-state bytes per GPU at ZeRO stage 0, 1, 2 or 3 over dp data-parallel GPUs.

    Defaults: mixed-precision Adam, 2 (bf16 weights) + 2 (bf16 grads) + 12 (fp32 master weights,
    momentum, variance) bytes per parameter. Raise ValueError for another stage.
    Returns {"params": bytes, "grads": bytes, "optimizer": bytes, "total": bytes}.
    """
    raise NotImplementedError("zero_memory_per_gpu: exercise 5.1")


def zero_comm_bytes_per_gpu(num_params, dp, stage, grad_bytes=2, param_bytes=2):
    """Bytes one GPU sends per step in the data-parallel syncs at ZeRO stage 0-3 (ring
    collectives, one micro-batch per step): which collectives does each stage run, on what?
    grad_bytes is the gradients' element size on the wire, param_bytes the weights'.
    """
    raise NotImplementedError("zero_comm_bytes_per_gpu: exercise 5.2")


# ==================================================================================================
# 6. The five scenarios (each returns a dict of numbers; the tests name the keys they expect)
# ==================================================================================================


def activation_bytes_per_layer(seq, micro_batch, hidden, heads, bytes_per_element=2):
    """Activation bytes one GPT layer stores for its backward, without recompute (Korthikanti et
    al. 2022: s b h (34 + 5 a s / h) at 2 bytes per element; scale for other element sizes)."""
    raise NotImplementedError("activation_bytes_per_layer: exercise 6.0")


def scenario_size_70b(num_params=70e9, gpus=16, gpu_memory=80e9, layers=80, hidden=8192,
                      heads=64, seq=4096, micro_batch=1):
    """70B parameters on 16 x 80 GB GPUs with ZeRO-3 (mixed-precision Adam).

    Returns {"states_total_bytes", "states_per_gpu_bytes", "headroom_bytes" (GPU memory left
    after the states), "activations_bytes" (all layers, no recompute),
    "activations_checkpointed_bytes" (full recompute: each layer keeps only its 2-byte input),
    "checkpointing_saves_factor", "fits_without_checkpointing", "fits_with_checkpointing"
    (states + activations within gpu_memory), "recompute_extra_compute" (share of compute added,
    backward = 2 forwards)}.
    """
    raise NotImplementedError("scenario_size_70b: exercise 6.1")


def scenario_stalled_scaleout(num_params=1.7e9, gpu_counts=(8, 16, 32, 64), gpus_per_node=8,
                              intra_bandwidth=300e9, inter_bandwidth=25e9, tokens_per_gpu=2048,
                              peak_flops=312e12, mfu=0.5, grad_bytes=2):
    """Plain DP, one flat ring all-reduce of the gradients after the backward, 8 to 64 GPUs.

    Compute per GPU: 6 * num_params * tokens_per_gpu / (peak_flops * mfu) seconds. The ring runs
    at the slowest link it crosses (bandwidth only, no latency).
    Returns {"rows": {N: {"bytes_per_rank", "allreduce_s", "compute_s", "step_s",
    "compute_fraction", "tokens_per_s_per_gpu", "crosses_nodes"}}, "hierarchical": {"gpus",
    "inter_node_bytes_per_rank", "flat_over_hierarchical", "allreduce_s", "compute_fraction"}}
    where "hierarchical" is the two-level all-reduce at the largest N (reduce-scatter in the
    node, all-reduce of the shard across nodes, all-gather in the node).
    """
    raise NotImplementedError("scenario_stalled_scaleout: exercise 6.2")


def scenario_3d_placement(layers=96, hidden=12288, seq=2048, micro_batch=1, microbatches=128,
                          tp=8, pp=8, bytes_per_element=2, intra_bandwidth=300e9,
                          inter_bandwidth=25e9):
    """GPT-3 175B on 8 nodes x 8 GPUs, TP=8 and PP=8: bytes per rank per step of each axis.

    Returns {"tp_bytes_per_rank", "pp_bytes_per_rank" (a middle stage: one activation forward
    and one gradient backward per micro-batch), "tp_over_pp", "tp_seconds_in_node",
    "tp_seconds_across_nodes", "pp_seconds_across_nodes", "tp_in_node" (should TP take the
    NVLink axis?)}.
    """
    raise NotImplementedError("scenario_3d_placement: exercise 6.3")


def scenario_gpipe_vs_1f1b(stages=8, microbatch_counts=(8, 64)):
    """GPipe vs 1F1B at P=8, M=8 and M=64.

    Returns {M: {"bubble" (of the step), "bubble_of_ideal" (idle time over the bubble-free time),
    "gpipe_in_flight", "one_f_one_b_in_flight" (stage 0, from your simulator),
    "activation_ratio" (GPipe's over 1F1B's)}}.
    """
    raise NotImplementedError("scenario_gpipe_vs_1f1b: exercise 6.4")


def scenario_ddp_vs_fsdp(num_params=13e9, gpus=8, gpu_memory=80e9, microbatches=8,
                         bytes_per_element=2):
    """DDP vs FSDP (ZeRO-3) for a 13B model on 8 GPUs.

    Returns {"ddp_states_per_gpu_bytes", "fsdp_states_per_gpu_bytes", "ddp_fits", "fsdp_fits"
    (states alone within gpu_memory), "ddp_bytes_per_rank", "fsdp_bytes_per_rank",
    "fsdp_over_ddp", "ddp_bytes_accumulating", "fsdp_bytes_accumulating" (per step with
    `microbatches` micro-batches of gradient accumulation)}.
    """
    raise NotImplementedError("scenario_ddp_vs_fsdp: exercise 6.5")
