/*
 * graph_runtime/blob.h -- the module blob: the bytes a graph module saves into an exported library and loads
 * back from (its symbol, its graph JSON and its constants), little-endian whatever the host, checksummed.
 * WriteBlob and ReadBlob are the whole format; Writer and Reader its little-endian fields.
 */
#ifndef BYOC_GRAPH_RUNTIME_BLOB_H_
#define BYOC_GRAPH_RUNTIME_BLOB_H_

#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "base.h"

namespace byoc {
namespace graph_runtime {

constexpr uint32_t kBlobVersion = 1;  // layout of WriteBlob

// A module's constants as given: (name, float32 values), in the order the module was created with.
using Constants = std::vector<std::pair<std::string, std::vector<float>>>;

// Blob: <magic 8> <u32 blob version> <u32 reserved 0>
//       <u64 n><symbol n bytes> <u64 n><graph json n bytes>
//       <u64 count> count x (<u64 n><name n bytes> <u64 elements><float32 LE x elements>)
//       <u64 FNV-1a 64 of every byte before it>
// All integers and floats little-endian, whatever the host.
inline uint64_t Fnv1a(const char* data, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(data[i]);
    h *= 1099511628211ULL;
  }
  return h;
}

class Writer {
 public:
  void U32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void U64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void Raw(const char* p, size_t n) { out_.append(p, n); }
  void Str(const std::string& s) {
    U64(s.size());
    Raw(s.data(), s.size());
  }
  void Floats(const std::vector<float>& v) {
    U64(v.size());
    for (float f : v) {
      uint32_t bits;
      std::memcpy(&bits, &f, sizeof(bits));
      U32(bits);
    }
  }
  std::string Finish() {
    U64(Fnv1a(out_.data(), out_.size()));
    return std::move(out_);
  }

 private:
  std::string out_;
};

class Reader {
 public:
  Reader(const char* data, size_t size) : p_(data), end_(data + size) {}
  size_t Remaining() const { return static_cast<size_t>(end_ - p_); }
  void Need(uint64_t n, const char* what) {
    if (n > Remaining()) {
      std::ostringstream os;
      os << "corrupted module blob: " << what << " needs " << n << " bytes but only "
         << Remaining() << " remain (truncated?)";
      Fail(os.str());
    }
  }
  uint64_t Uint(int bytes, const char* what) {
    Need(bytes, what);
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p_[i])) << (8 * i);
    p_ += bytes;
    return v;
  }
  std::string Str(const char* what) {
    uint64_t n = Uint(8, what);
    Need(n, what);
    std::string s(p_, static_cast<size_t>(n));
    p_ += n;
    return s;
  }
  std::vector<float> Floats(const char* what) {
    uint64_t n = Uint(8, what);
    if (n > Remaining() / 4) Need(n * 4 > n ? n * 4 : std::numeric_limits<uint64_t>::max(), what);
    std::vector<float> v(static_cast<size_t>(n));
    for (uint64_t i = 0; i < n; ++i) {
      uint32_t bits = static_cast<uint32_t>(Uint(4, what));
      std::memcpy(&v[i], &bits, sizeof(bits));
    }
    return v;
  }

 private:
  const char* p_;
  const char* end_;
};


constexpr size_t kMagicSize = 8;

// A module blob of the runtime whose blobs start with `magic`.
inline std::string WriteBlob(const char (&magic)[kMagicSize], const std::string& symbol, const std::string& graph_json,
                             const Constants& consts) {
  Writer w;
  w.Raw(magic, kMagicSize);
  w.U32(kBlobVersion);
  w.U32(0);
  w.Str(symbol);
  w.Str(graph_json);
  w.U64(consts.size());
  for (const auto& c : consts) {
    w.Str(c.first);
    w.Floats(c.second);
  }
  return w.Finish();
}

// What a module blob holds.
struct Blob {
  std::string symbol;
  std::string graph_json;
  Constants consts;
};

// The blob of `size` bytes at `data`, checked: the magic of runtime `name`, the checksum, the version and every
// length. Fails with what is wrong otherwise.
inline Blob ReadBlob(const char (&magic)[kMagicSize], const char* name, const char* data, size_t size) {
  if (size < kMagicSize + 16 || std::memcmp(data, magic, kMagicSize) != 0)
    Fail(std::string("not a ") + name + " module blob (bad magic or too short: " +
         std::to_string(size) + " bytes)");
  Reader tail(data + size - 8, 8);
  if (tail.Uint(8, "checksum") != Fnv1a(data, size - 8))
    Fail("corrupted module blob: checksum mismatch (the artifact file is damaged; export it again)");
  Reader r(data + kMagicSize, size - kMagicSize - 8);
  uint64_t version = r.Uint(4, "version");
  if (version != kBlobVersion)
    Fail("module blob version " + std::to_string(version) + " is not supported (this runtime reads " +
         std::to_string(kBlobVersion) + "); rebuild the artifact with this byoc version");
  r.Uint(4, "reserved");
  Blob blob;
  blob.symbol = r.Str("symbol");
  blob.graph_json = r.Str("graph JSON");
  uint64_t count = r.Uint(8, "constant count");
  if (count > r.Remaining() / 16) Fail("corrupted module blob: constant count " + std::to_string(count) + " is impossible");
  for (uint64_t i = 0; i < count; ++i) {
    std::string name = r.Str("constant name");
    blob.consts.emplace_back(std::move(name), r.Floats("constant data"));
  }
  if (r.Remaining() != 0) Fail("corrupted module blob: " + std::to_string(r.Remaining()) + " unexpected trailing bytes");
  return blob;
}

}  // namespace graph_runtime
}  // namespace byoc

#endif  // BYOC_GRAPH_RUNTIME_BLOB_H_
