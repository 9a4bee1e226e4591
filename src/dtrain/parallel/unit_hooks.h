// UnitHooks: what the pipeline executor tells the layer above it about the units of the stage
// model it runs, so data parallelism and ZeRO attach to any schedule without walking the model
// themselves (Megatron's DDP backward hooks, picotron's require_backward_grad_sync, PyTorch
// pipelining's UNSHARD / RESHARD / REDUCE_GRAD actions). A unit is a contiguous range of the
// stage's flat parameters (parallel::StageUnits: the final LayerNorm, one block, the
// embeddings); units are numbered in backward order. The base class does nothing, so a run
// without data parallelism is the same executor with no-op hooks.
#pragma once

namespace dtrain::parallel {

class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  // The executor will need `unit`'s parameters soon: start fetching them (ZeRO-3's all-gather
  // of the next block while this one computes).
  virtual void prefetch(int /*unit*/) {}
  // `unit`'s parameters must be bound in the model when this returns; every acquire is paired
  // with a release, and acquires of one unit nest (the embeddings stay held through a forward
  // that also runs the head, which reads the tied wte).
  virtual void acquire(int /*unit*/) {}
  virtual void release(int /*unit*/) {}
  // A backward is about to add to `unit`'s gradient: its gradient storage must be bound.
  virtual void begin_backward(int /*unit*/) {}
  // This micro-batch's contribution to `unit`'s gradient is complete. `last`: it was the
  // step's last contribution on this rank (the unit's gradient is final), which is when a
  // bucket that syncs once per step may fire.
  virtual void end_backward(int /*unit*/, bool /*last*/) {}
};

}  // namespace dtrain::parallel
