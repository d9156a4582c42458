#include "engine/cpu/capabilities.h"

#include <fstream>
#include <thread>

#include "oneapi/dnnl/dnnl.hpp"

namespace ampd::engine::cpu {
namespace {

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

bool OneDnnBf16Matmul() {
  try {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::memory::desc a({16, 16}, dt::bf16, tag::ab), c({16, 16}, dt::bf16, tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), eng);
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

}  // namespace

const CpuCapabilities& ProbeCpu() {
  static const CpuCapabilities* caps = [] {
    auto* c = new CpuCapabilities();
    c->name = CpuModelName();
    c->threads = static_cast<int>(std::thread::hardware_concurrency());
    __builtin_cpu_init();
    c->avx512_bf16 = __builtin_cpu_supports("avx512bf16");
    c->f16c = __builtin_cpu_supports("f16c");
    c->bf16_matmul = OneDnnBf16Matmul();
    return c;
  }();
  return *caps;
}

}  // namespace ampd::engine::cpu
