// libFuzzer target: arbitrary bytes through the in-memory safetensors parser
// (the one ReadSafetensors uses). Build and run with tools/fuzz.
#include <cstddef>
#include <cstdint>

#include "engine/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)ampd::engine::io::ParseSafetensors(data, size, "fuzz.safetensors");
  return 0;
}
