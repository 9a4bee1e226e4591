// cpu_relax(): the spin-wait hint (x86 PAUSE, Arm YIELD) for loops that poll shared memory: it
// keeps a spinning core from flooding the memory system and hands the core's resources to its
// hyperthread sibling, at a cost of 10 to 140 cycles by CPU (bound spins by time, not count).
#pragma once

namespace dtrain {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace dtrain
