// libFuzzer target: ReadIdxDataset over an images file and a labels file cut
// from one input, raw or gzipped. Build and run with tools/fuzz.
//
// Input layout: byte 0 = flags (bit 0: gzip the images file, bit 1: gzip the
// labels file, bits 2..7: num_classes, 0 meaning the default 10), bytes 1..2 =
// length of the images part (little endian, clamped to what is left), then the
// images part, then the labels part.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/data/dataset.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

std::string WritePart(const std::string& name, const uint8_t* data, size_t size, bool gzip) {
  if (!gzip) return ampd::fuzz::WriteFile(name, data, size);
  const std::string path = ampd::fuzz::ScratchDir() + "/" + name + ".gz";
  gzFile f = gzopen(path.c_str(), "wb1");
  if (f == nullptr) std::abort();
  if (size > 0 && gzwrite(f, data, static_cast<unsigned>(size)) != static_cast<int>(size)) {
    std::abort();
  }
  gzclose(f);
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const uint8_t flags = data[0];
  size_t images_size = static_cast<size_t>(data[1]) | (static_cast<size_t>(data[2]) << 8);
  data += 3;
  size -= 3;
  if (images_size > size) images_size = size;
  const int num_classes = (flags >> 2) == 0 ? 10 : (flags >> 2);
  const std::string images = WritePart("images", data, images_size, flags & 1);
  const std::string labels = WritePart("labels", data + images_size, size - images_size, flags & 2);
  (void)ampd::engine::data::ReadIdxDataset(images, labels, num_classes);
  return 0;
}
