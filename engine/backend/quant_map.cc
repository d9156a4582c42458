#include "engine/backend/quant_map.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace ampd::engine::backend {

const std::array<float, 256>& DynamicMap() {
  static constexpr std::array<float, 256> kMap = {
      -0x1.fc6666p-1f,  -0x1.f53334p-1f,  -0x1.ee0000p-1f,  -0x1.e6ccccp-1f,  -0x1.df999ap-1f,
      -0x1.d86666p-1f,  -0x1.d13334p-1f,  -0x1.ca0000p-1f,  -0x1.c2ccccp-1f,  -0x1.bb999ap-1f,
      -0x1.b46666p-1f,  -0x1.ad3334p-1f,  -0x1.a60000p-1f,  -0x1.9eccccp-1f,  -0x1.97999ap-1f,
      -0x1.906666p-1f,  -0x1.893334p-1f,  -0x1.820000p-1f,  -0x1.7accccp-1f,  -0x1.73999ap-1f,
      -0x1.6c6668p-1f,  -0x1.653334p-1f,  -0x1.5e0000p-1f,  -0x1.56ccccp-1f,  -0x1.4f999ap-1f,
      -0x1.486668p-1f,  -0x1.413334p-1f,  -0x1.3a0000p-1f,  -0x1.32ccccp-1f,  -0x1.2b999ap-1f,
      -0x1.246668p-1f,  -0x1.1d3334p-1f,  -0x1.160000p-1f,  -0x1.0eccccp-1f,  -0x1.079998p-1f,
      -0x1.006666p-1f,  -0x1.f26664p-2f,  -0x1.e40000p-2f,  -0x1.d59998p-2f,  -0x1.c73334p-2f,
      -0x1.b8ccccp-2f,  -0x1.aa6666p-2f,  -0x1.9c0000p-2f,  -0x1.8d9998p-2f,  -0x1.7f3334p-2f,
      -0x1.70ccccp-2f,  -0x1.626666p-2f,  -0x1.540000p-2f,  -0x1.459998p-2f,  -0x1.373334p-2f,
      -0x1.28ccccp-2f,  -0x1.1a6668p-2f,  -0x1.0c0000p-2f,  -0x1.fb3332p-3f,  -0x1.de6666p-3f,
      -0x1.c1999ap-3f,  -0x1.a4ccccp-3f,  -0x1.880000p-3f,  -0x1.6b3334p-3f,  -0x1.4e6666p-3f,
      -0x1.31999ap-3f,  -0x1.14ccccp-3f,  -0x1.fp-4f,       -0x1.b66668p-4f,  -0x1.93d70ap-4f,
      -0x1.8851eep-4f,  -0x1.7ccccep-4f,  -0x1.7147aep-4f,  -0x1.65c290p-4f,  -0x1.5a3d70p-4f,
      -0x1.4eb854p-4f,  -0x1.433334p-4f,  -0x1.37ae14p-4f,  -0x1.2c28f6p-4f,  -0x1.20a3d6p-4f,
      -0x1.151ebap-4f,  -0x1.09999ap-4f,  -0x1.fc28f6p-5f,  -0x1.e51ebap-5f,  -0x1.ce147ap-5f,
      -0x1.b70a3ep-5f,  -0x1.ap-5f,       -0x1.88f5c2p-5f,  -0x1.71eb86p-5f,  -0x1.5ae146p-5f,
      -0x1.43d70ap-5f,  -0x1.2ccccep-5f,  -0x1.15c290p-5f,  -0x1.fd70a4p-6f,  -0x1.cf5c2ap-6f,
      -0x1.a147aep-6f,  -0x1.733334p-6f,  -0x1.451ebap-6f,  -0x1.170a3ep-6f,  -0x1.d1eb86p-7f,
      -0x1.75c290p-7f,  -0x1.3e76c8p-7f,  -0x1.2c0830p-7f,  -0x1.19999ap-7f,  -0x1.072b02p-7f,
      -0x1.e978d4p-8f,  -0x1.c49ba6p-8f,  -0x1.9fbe76p-8f,  -0x1.7ae148p-8f,  -0x1.56041ap-8f,
      -0x1.3126e8p-8f,  -0x1.0c49bap-8f,  -0x1.ced914p-9f,  -0x1.851eb8p-9f,  -0x1.3b645ap-9f,
      -0x1.e353f8p-10f, -0x1.4fdf3ap-10f, -0x1.eecbfep-11f, -0x1.b3d07cp-11f, -0x1.78d500p-11f,
      -0x1.3dd982p-11f, -0x1.02de02p-11f, -0x1.8fc506p-12f, -0x1.19ce0ap-12f, -0x1.47ae16p-13f,
      -0x1.743e96p-14f, -0x1.15df66p-14f, -0x1.6f0068p-15f, -0x1.64840cp-16f, -0x1.040bfep-17f,
      -0x1.b43528p-19f, -0x1.27476ep-21f, 0x0.0p+0f,        0x1.27476ep-21f,  0x1.b43528p-19f,
      0x1.040bfep-17f,  0x1.64840cp-16f,  0x1.6f0068p-15f,  0x1.15df66p-14f,  0x1.743e96p-14f,
      0x1.47ae16p-13f,  0x1.19ce0ap-12f,  0x1.8fc506p-12f,  0x1.02de02p-11f,  0x1.3dd982p-11f,
      0x1.78d500p-11f,  0x1.b3d07cp-11f,  0x1.eecbfep-11f,  0x1.4fdf3ap-10f,  0x1.e353f8p-10f,
      0x1.3b645ap-9f,   0x1.851eb8p-9f,   0x1.ced914p-9f,   0x1.0c49bap-8f,   0x1.3126e8p-8f,
      0x1.56041ap-8f,   0x1.7ae148p-8f,   0x1.9fbe76p-8f,   0x1.c49ba6p-8f,   0x1.e978d4p-8f,
      0x1.072b02p-7f,   0x1.19999ap-7f,   0x1.2c0830p-7f,   0x1.3e76c8p-7f,   0x1.75c290p-7f,
      0x1.d1eb86p-7f,   0x1.170a3ep-6f,   0x1.451ebap-6f,   0x1.733334p-6f,   0x1.a147aep-6f,
      0x1.cf5c2ap-6f,   0x1.fd70a4p-6f,   0x1.15c290p-5f,   0x1.2ccccep-5f,   0x1.43d70ap-5f,
      0x1.5ae146p-5f,   0x1.71eb86p-5f,   0x1.88f5c2p-5f,   0x1.ap-5f,        0x1.b70a3ep-5f,
      0x1.ce147ap-5f,   0x1.e51ebap-5f,   0x1.fc28f6p-5f,   0x1.09999ap-4f,   0x1.151ebap-4f,
      0x1.20a3d6p-4f,   0x1.2c28f6p-4f,   0x1.37ae14p-4f,   0x1.433334p-4f,   0x1.4eb854p-4f,
      0x1.5a3d70p-4f,   0x1.65c290p-4f,   0x1.7147aep-4f,   0x1.7ccccep-4f,   0x1.8851eep-4f,
      0x1.93d70ap-4f,   0x1.b66668p-4f,   0x1.fp-4f,        0x1.14ccccp-3f,   0x1.31999ap-3f,
      0x1.4e6666p-3f,   0x1.6b3334p-3f,   0x1.880000p-3f,   0x1.a4ccccp-3f,   0x1.c1999ap-3f,
      0x1.de6666p-3f,   0x1.fb3332p-3f,   0x1.0c0000p-2f,   0x1.1a6668p-2f,   0x1.28ccccp-2f,
      0x1.373334p-2f,   0x1.459998p-2f,   0x1.540000p-2f,   0x1.626666p-2f,   0x1.70ccccp-2f,
      0x1.7f3334p-2f,   0x1.8d9998p-2f,   0x1.9c0000p-2f,   0x1.aa6666p-2f,   0x1.b8ccccp-2f,
      0x1.c73334p-2f,   0x1.d59998p-2f,   0x1.e40000p-2f,   0x1.f26664p-2f,   0x1.006666p-1f,
      0x1.079998p-1f,   0x1.0eccccp-1f,   0x1.160000p-1f,   0x1.1d3334p-1f,   0x1.246668p-1f,
      0x1.2b999ap-1f,   0x1.32ccccp-1f,   0x1.3a0000p-1f,   0x1.413334p-1f,   0x1.486668p-1f,
      0x1.4f999ap-1f,   0x1.56ccccp-1f,   0x1.5e0000p-1f,   0x1.653334p-1f,   0x1.6c6668p-1f,
      0x1.73999ap-1f,   0x1.7accccp-1f,   0x1.820000p-1f,   0x1.893334p-1f,   0x1.906666p-1f,
      0x1.97999ap-1f,   0x1.9eccccp-1f,   0x1.a60000p-1f,   0x1.ad3334p-1f,   0x1.b46666p-1f,
      0x1.bb999ap-1f,   0x1.c2ccccp-1f,   0x1.ca0000p-1f,   0x1.d13334p-1f,   0x1.d86666p-1f,
      0x1.df999ap-1f,   0x1.e6ccccp-1f,   0x1.ee0000p-1f,   0x1.f53334p-1f,   0x1.fc6666p-1f,
      0x1.p+0f};
  return kMap;
}

const std::array<float, 256>& UnsignedDynamicMap() {
  static constexpr std::array<float, 256> kMap = {
      0x0.0p+0f,       0x1.5cf754p-22f, 0x1.a01330p-21f, 0x1.1d3670p-19f, 0x1.2599ecp-18f,
      0x1.bc98a2p-18f, 0x1.29cbaap-17f, 0x1.0624dcp-16f, 0x1.c2e340p-16f, 0x1.3fd0d0p-15f,
      0x1.9e3000p-15f, 0x1.fc8f34p-15f, 0x1.2d7732p-14f, 0x1.5ca6c8p-14f, 0x1.8bd662p-14f,
      0x1.0cb296p-13f, 0x1.82a994p-13f, 0x1.f8a092p-13f, 0x1.374bc8p-12f, 0x1.724744p-12f,
      0x1.ad42c6p-12f, 0x1.e83e44p-12f, 0x1.119ce2p-11f, 0x1.2f1aa0p-11f, 0x1.4c9860p-11f,
      0x1.6a1620p-11f, 0x1.8793dep-11f, 0x1.a511a0p-11f, 0x1.c28f5ep-11f, 0x1.e00d1cp-11f,
      0x1.fd8adcp-11f, 0x1.2b020cp-10f, 0x1.74bc6ap-10f, 0x1.be76c8p-10f, 0x1.041894p-9f,
      0x1.28f5c2p-9f,  0x1.4dd2f0p-9f,  0x1.72b020p-9f,  0x1.978d4ep-9f,  0x1.bc6a80p-9f,
      0x1.e147aep-9f,  0x1.03126ep-8f,  0x1.158104p-8f,  0x1.27ef9ep-8f,  0x1.3a5e34p-8f,
      0x1.4cccccp-8f,  0x1.5f3b64p-8f,  0x1.71a9fap-8f,  0x1.841894p-8f,  0x1.96872ap-8f,
      0x1.a8f5c2p-8f,  0x1.bb645cp-8f,  0x1.cdd2f0p-8f,  0x1.e0418ap-8f,  0x1.f2b01ep-8f,
      0x1.028f5cp-7f,  0x1.0bc6a8p-7f,  0x1.14fdf2p-7f,  0x1.1e3540p-7f,  0x1.276c8ap-7f,
      0x1.30a3d6p-7f,  0x1.39db24p-7f,  0x1.43126ep-7f,  0x1.5eb854p-7f,  0x1.8ccccep-7f,
      0x1.bae146p-7f,  0x1.e8f5c4p-7f,  0x1.0b851ep-6f,  0x1.228f5ep-6f,  0x1.39999ap-6f,
      0x1.50a3d6p-6f,  0x1.67ae16p-6f,  0x1.7eb852p-6f,  0x1.95c28ep-6f,  0x1.accccep-6f,
      0x1.c3d70ep-6f,  0x1.dae146p-6f,  0x1.f1eb86p-6f,  0x1.047ae0p-5f,  0x1.1p-5f,
      0x1.1b851ep-5f,  0x1.270a3ep-5f,  0x1.328f5ep-5f,  0x1.3e147ap-5f,  0x1.49999ap-5f,
      0x1.551eb8p-5f,  0x1.60a3d6p-5f,  0x1.6c28f6p-5f,  0x1.77ae14p-5f,  0x1.833334p-5f,
      0x1.8eb850p-5f,  0x1.9a3d70p-5f,  0x1.a5c28ep-5f,  0x1.b147aep-5f,  0x1.bccccep-5f,
      0x1.c851eep-5f,  0x1.d3d70ep-5f,  0x1.df5c2ap-5f,  0x1.eae146p-5f,  0x1.f66666p-5f,
      0x1.00f5c4p-4f,  0x1.06b854p-4f,  0x1.0c7ae2p-4f,  0x1.123d70p-4f,  0x1.180000p-4f,
      0x1.1dc290p-4f,  0x1.238520p-4f,  0x1.2947aep-4f,  0x1.2f0a3ep-4f,  0x1.34cccep-4f,
      0x1.3a8f5ep-4f,  0x1.4051ecp-4f,  0x1.46147cp-4f,  0x1.4bd70ap-4f,  0x1.51999ap-4f,
      0x1.575c2ap-4f,  0x1.5d1eb8p-4f,  0x1.62e148p-4f,  0x1.68a3d6p-4f,  0x1.6e6666p-4f,
      0x1.7428f6p-4f,  0x1.79eb86p-4f,  0x1.7fae16p-4f,  0x1.8570a4p-4f,  0x1.8b3334p-4f,
      0x1.90f5c4p-4f,  0x1.96b852p-4f,  0x1.a80000p-4f,  0x1.c4ccccp-4f,  0x1.e1999ap-4f,
      0x1.fe6666p-4f,  0x1.0d9998p-3f,  0x1.1c0000p-3f,  0x1.2a6668p-3f,  0x1.38ccccp-3f,
      0x1.473334p-3f,  0x1.559998p-3f,  0x1.640000p-3f,  0x1.726668p-3f,  0x1.80ccccp-3f,
      0x1.8f3334p-3f,  0x1.9d9998p-3f,  0x1.ac0000p-3f,  0x1.ba6668p-3f,  0x1.c8ccccp-3f,
      0x1.d73334p-3f,  0x1.e59998p-3f,  0x1.f40000p-3f,  0x1.013332p-2f,  0x1.086666p-2f,
      0x1.0f999ap-2f,  0x1.16ccccp-2f,  0x1.1e0000p-2f,  0x1.253334p-2f,  0x1.2c6666p-2f,
      0x1.339998p-2f,  0x1.3accccp-2f,  0x1.420000p-2f,  0x1.493334p-2f,  0x1.506666p-2f,
      0x1.579998p-2f,  0x1.5eccccp-2f,  0x1.660000p-2f,  0x1.6d3334p-2f,  0x1.746666p-2f,
      0x1.7b9998p-2f,  0x1.82ccccp-2f,  0x1.8a0000p-2f,  0x1.913334p-2f,  0x1.986666p-2f,
      0x1.9f9998p-2f,  0x1.a6ccccp-2f,  0x1.ae0000p-2f,  0x1.b53334p-2f,  0x1.bc6666p-2f,
      0x1.c39998p-2f,  0x1.caccccp-2f,  0x1.d20000p-2f,  0x1.d93334p-2f,  0x1.e06666p-2f,
      0x1.e79998p-2f,  0x1.eeccccp-2f,  0x1.f60000p-2f,  0x1.fd3332p-2f,  0x1.023334p-1f,
      0x1.05ccccp-1f,  0x1.096666p-1f,  0x1.0d0000p-1f,  0x1.109998p-1f,  0x1.143334p-1f,
      0x1.17ccccp-1f,  0x1.1b6668p-1f,  0x1.1f0000p-1f,  0x1.22999ap-1f,  0x1.263334p-1f,
      0x1.29ccccp-1f,  0x1.2d6668p-1f,  0x1.310000p-1f,  0x1.34999ap-1f,  0x1.383334p-1f,
      0x1.3bccccp-1f,  0x1.3f6668p-1f,  0x1.430000p-1f,  0x1.46999ap-1f,  0x1.4a3334p-1f,
      0x1.4dccccp-1f,  0x1.516668p-1f,  0x1.550000p-1f,  0x1.58999ap-1f,  0x1.5c3334p-1f,
      0x1.5fccccp-1f,  0x1.636668p-1f,  0x1.670000p-1f,  0x1.6a999ap-1f,  0x1.6e3334p-1f,
      0x1.71ccccp-1f,  0x1.756668p-1f,  0x1.790000p-1f,  0x1.7c999ap-1f,  0x1.803334p-1f,
      0x1.83ccccp-1f,  0x1.876668p-1f,  0x1.8b0000p-1f,  0x1.8e9998p-1f,  0x1.923334p-1f,
      0x1.95ccccp-1f,  0x1.996668p-1f,  0x1.9d0000p-1f,  0x1.a09998p-1f,  0x1.a43334p-1f,
      0x1.a7ccccp-1f,  0x1.ab6668p-1f,  0x1.af0000p-1f,  0x1.b29998p-1f,  0x1.b63334p-1f,
      0x1.b9ccccp-1f,  0x1.bd6668p-1f,  0x1.c10000p-1f,  0x1.c49998p-1f,  0x1.c83334p-1f,
      0x1.cbccccp-1f,  0x1.cf6668p-1f,  0x1.d30000p-1f,  0x1.d69998p-1f,  0x1.da3334p-1f,
      0x1.ddccccp-1f,  0x1.e16668p-1f,  0x1.e50000p-1f,  0x1.e89998p-1f,  0x1.ec3334p-1f,
      0x1.efccccp-1f,  0x1.f36668p-1f,  0x1.f70000p-1f,  0x1.fa9998p-1f,  0x1.fe3334p-1f,
      0x1.p+0f};
  return kMap;
}

uint8_t NearestCode(const std::array<float, 256>& map, float x) {
  // The first value >= x, then whichever of it and its predecessor is nearer.
  const auto it = std::lower_bound(map.begin(), map.end(), x);
  if (it == map.begin()) return 0;
  if (it == map.end()) return 255;
  const int hi = static_cast<int>(it - map.begin());
  return static_cast<uint8_t>(x - map[hi - 1] <= map[hi] - x ? hi - 1 : hi);
}

namespace {

float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Floats as unsigned integers in the same order (-0 just below +0).
uint32_t Ordered(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
float FromOrdered(uint32_t k) { return FromBits((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k); }

// The largest x in [a, b] that NearestCode gives a's code (x - a <= b - x in
// f32, which is monotone in x): a bisection over the floats between them.
float Threshold(float a, float b) {
  auto takes_a = [&](float x) { return x - a <= b - x; };
  uint32_t lo = Ordered(a), hi = Ordered(b);  // takes_a(a), !takes_a(b)
  while (hi - lo > 1) {
    const uint32_t mid = lo + (hi - lo) / 2;
    (takes_a(FromOrdered(mid)) ? lo : hi) = mid;
  }
  return FromOrdered(lo);
}

// The table of `map`, or null when some bucket holds two thresholds (then
// the one-lookup rule would be wrong and callers take the binary search).
const CodeTable* BuildCodeTable(const std::array<float, 256>& map) {
  auto* t = new CodeTable;
  for (int c = 0; c < 255; ++c) t->threshold[c] = Threshold(map[c], map[c + 1]);
  t->threshold[255] = std::numeric_limits<float>::infinity();
  t->entry.fill(0xFFFFu);
  for (uint32_t key = 0; key < 65536; ++key) {
    const float a = FromBits(key << 16), b = FromBits((key << 16) | 0xFFFFu);
    if (std::isnan(a) || std::isnan(b)) continue;  // never a state's value
    const float lo = std::min(a, b), hi = std::max(a, b);
    const uint8_t start = NearestCode(map, lo);
    const uint8_t end = NearestCode(map, hi);
    if (end > start + 1) {
      delete t;
      return nullptr;
    }
    uint32_t low = 0xFFFFu;  // no threshold in this bucket: never the next code
    if (end == start + 1) {
      uint32_t bits;
      std::memcpy(&bits, &t->threshold[start], 4);
      if ((bits >> 16) != key) {  // cannot happen: lo <= threshold < hi
        delete t;
        return nullptr;
      }
      low = CodeTable::Low16(bits);
    }
    t->entry[key] = (uint32_t{start} << 16) | low;
  }
  return t;
}

}  // namespace

const CodeTable* CodeTableFor(const std::array<float, 256>& map) {
  static const CodeTable* signed_table = BuildCodeTable(DynamicMap());
  static const CodeTable* unsigned_table = BuildCodeTable(UnsignedDynamicMap());
  if (&map == &DynamicMap()) return signed_table;
  if (&map == &UnsignedDynamicMap()) return unsigned_table;
  return nullptr;
}

uint8_t FastNearestCode(const std::array<float, 256>& map, float x) {
  const CodeTable* table = CodeTableFor(map);
  return table != nullptr ? table->Code(x) : NearestCode(map, x);
}

void QuantizeBlockwise(const std::array<float, 256>& map, const float* x, int64_t n, uint8_t* codes,
                       float* absmax) {
  const CodeTable* table = CodeTableFor(map);
  auto code = [&](float v) { return table != nullptr ? table->Code(v) : NearestCode(map, v); };
  const uint8_t zero = code(0.0f);
  for (int64_t b = 0; b * kQuantBlock < n; ++b) {
    const int64_t begin = b * kQuantBlock, len = std::min(kQuantBlock, n - begin);
    float m = 0;
    for (int64_t i = 0; i < len; ++i) m = std::max(m, std::fabs(x[begin + i]));
    absmax[b] = m;
    if (m == 0) {
      std::fill_n(codes + begin, len, zero);
      continue;
    }
    const float inv = 1.0f / m;
    for (int64_t i = 0; i < len; ++i) codes[begin + i] = code(x[begin + i] * inv);
  }
}

void DequantizeBlockwise(const std::array<float, 256>& map, const uint8_t* codes,
                         const float* absmax, int64_t n, float* x) {
  for (int64_t i = 0; i < n; ++i) x[i] = map[codes[i]] * absmax[i / kQuantBlock];
}

}  // namespace ampd::engine::backend
