// Each system library that @system exposes links and does real work.
#include <sqlite3.h>
#include <zlib.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace ampd {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2) return absl::InvalidArgumentError(absl::StrCat("x: ", x, " is odd"));
  return x / 2;
}

TEST(SystemLibsTest, Abseil) {
  EXPECT_EQ(*Half(8), 4);
  EXPECT_EQ(Half(3).status().message(), "x: 3 is odd");
}

TEST(SystemLibsTest, ZlibRoundTrip) {
  std::string text(1000, 'a');
  std::vector<Bytef> packed(compressBound(text.size()));
  uLongf packed_len = packed.size();
  ASSERT_EQ(compress(packed.data(), &packed_len, reinterpret_cast<const Bytef*>(text.data()),
                     text.size()),
            Z_OK);
  EXPECT_LT(packed_len, text.size());
  std::string out(text.size(), '\0');
  uLongf out_len = out.size();
  ASSERT_EQ(uncompress(reinterpret_cast<Bytef*>(out.data()), &out_len, packed.data(), packed_len),
            Z_OK);
  EXPECT_EQ(out, text);
}

TEST(SystemLibsTest, Sqlite) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(":memory:", &db), SQLITE_OK);
  ASSERT_EQ(
      sqlite3_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES (41);", nullptr, nullptr, nullptr),
      SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT x + 1 FROM t", -1, &stmt, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(stmt, 0), 42);
  sqlite3_finalize(stmt);
  sqlite3_close(db);
}

TEST(SystemLibsTest, OneDnnMatmul) {
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  std::vector<float> a = {1, 2, 3, 4, 5, 6};  // 2x3
  std::vector<float> b = {1, 0, 0, 1, 1, 1};  // 3x2
  std::vector<float> c(4);
  dnnl::memory::desc ad({2, 3}, dt::f32, tag::ab), bd({3, 2}, dt::f32, tag::ab),
      cd({2, 2}, dt::f32, tag::ab);
  dnnl::memory am(ad, eng, a.data()), bm(bd, eng, b.data()), cm(cd, eng, c.data());
  dnnl::matmul mm(dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, cd), eng));
  mm.execute(strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  strm.wait();
  EXPECT_EQ(c, (std::vector<float>{4, 5, 10, 11}));
}

}  // namespace
}  // namespace ampd
