// DTRAIN_MULTIVERSION: compiles a hot loop's function for AVX-512 (x86-64-v4), AVX2
// (x86-64-v3) and the baseline, and picks one when the program loads (GCC's target_clones,
// resolved by the CPU's features), so the portable build keeps the wide vectors where the
// machine has them. The loops it marks sum in a fixed lane order and C++20 (ISO) mode contracts
// no multiply-add, so every clone computes the same bits. Empty under -march=native (the whole
// build already targets the machine), sanitizers (their runtime is not set up when the clones
// are resolved), clang and non-x86 targets.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
    !defined(DTRAIN_NATIVE_BUILD) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
#define DTRAIN_MULTIVERSION \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DTRAIN_MULTIVERSION
#endif
