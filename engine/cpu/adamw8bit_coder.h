#ifndef AMPD_ENGINE_CPU_ADAMW8BIT_CODER_H_
#define AMPD_ENGINE_CPU_ADAMW8BIT_CODER_H_

// How the CPU's fused 8-bit AdamW block (optimizers8bit.cc; CPUs with
// AVX-512 VBMI) codes its new moments: by the VBMI search (quant_vbmi.h) or
// by one gather a value from the map's code table (CodeTable). Both give the
// reference's codes, so the choice never changes a result, only the time:
// on AMD's Zen 4 and Zen 5 the search is the faster, on Intel's cores the
// gathers (2.97 against 3.95 ms for the MLP's 5.8 M weights on a Xeon with
// AMX). kAuto times both once, on first use, and keeps the faster.

namespace ampd::engine::cpu {

enum class FusedCoder { kAuto, kSearch, kGather };

// For tests and benchmarks: force a coder (kAuto: the timed choice again).
void SetFusedCoder(FusedCoder coder);
// The coder the fused block uses now: kSearch or kGather.
FusedCoder ResolvedFusedCoder();
const char* FusedCoderName(FusedCoder coder);

}  // namespace ampd::engine::cpu

#endif  // AMPD_ENGINE_CPU_ADAMW8BIT_CODER_H_
