// Fused softmax + cross-entropy over the vocabulary, mean over the BT positions. Rows are
// split across cx's team; the mean is summed in row order, so it does not depend on the team.
#pragma once

#include <cstdint>

#include "dtrain/model/gemm.h"

namespace dtrain::model {

// probs = softmax(logits) row by row (probs may be the logits buffer itself);
// losses[r] = -log probs[r, targets[r]]. Returns the mean loss.
float crossentropy_softmax_forward(float* probs,            // (BT, V)
                                   float* losses,           // (BT)
                                   const float* logits,     // (BT, V)
                                   const int32_t* targets,  // (BT), each in [0, V)
                                   int64_t BT, int64_t V, const Compute& cx = {});

// Gradient of dloss * mean loss with respect to the logits, accumulated:
// dlogits[r, i] += dloss / BT * (probs[r, i] - [i == targets[r]]).
void crossentropy_softmax_backward(float* dlogits,          // (BT, V), not aliasing probs
                                   const float* probs,      // (BT, V)
                                   const int32_t* targets,  // (BT)
                                   float dloss, int64_t BT, int64_t V);

// The same gradient written over the probabilities (the one op that overwrites instead of
// accumulating: the model's logits buffer becomes its gradient, saving a (BT, V) buffer).
void crossentropy_softmax_backward_inplace(float* probs,            // (BT, V) in, dlogits out
                                           const int32_t* targets,  // (BT)
                                           float dloss, int64_t BT, int64_t V,
                                           const Compute& cx = {});

}  // namespace dtrain::model
