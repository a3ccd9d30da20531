/*
 * graph_runtime/blob.h -- the module blob: the bytes a graph module saves into an exported library and loads
 * back from (its symbol, its graph JSON, its constant table and its weights, or the name of the library section
 * that holds them: weights.h), little-endian whatever the host, checksummed.
 * WriteBlob and ReadBlob are the whole format; Writer and Reader its little-endian fields.
 */
#ifndef BYOC_GRAPH_RUNTIME_BLOB_H_
#define BYOC_GRAPH_RUNTIME_BLOB_H_

#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "base.h"
#include "weights.h"

namespace byoc {
namespace graph_runtime {

constexpr uint32_t kBlobVersion = 2;  // layout of WriteBlob

// One constant of a module: its name, how many float32 values it has and where they start in the module's
// weights (a byte offset, a multiple of kWeightAlign).
struct ConstEntry {
  std::string name;
  uint64_t count = 0;
  uint64_t offset = 0;
};

// The weights `entries` lay out, one after the other at aligned offsets (each entry's offset set here);
// returns their size in bytes.
inline uint64_t LayOut(std::vector<ConstEntry>* entries) {
  uint64_t end = 0;
  for (ConstEntry& e : *entries) {
    e.offset = (end + kWeightAlign - 1) / kWeightAlign * kWeightAlign;
    end = e.offset + e.count * sizeof(float);
  }
  return end;
}

// Where a blob's weights are: `symbol`, a section of the library the blob was exported into (empty: in the blob,
// after the constant table), of `bytes` bytes, with checksum (WeightsChecksum) `checksum`.
struct WeightsRef {
  std::string symbol;
  uint64_t bytes = 0;
  uint64_t checksum = 0;
};

// Blob: <magic 8> <u32 blob version> <u32 reserved 0>
//       <u64 n><symbol n bytes> <u64 n><graph json n bytes>
//       <u64 n><weights symbol n bytes> <u64 weights bytes> <u64 weights checksum>
//       <u64 count> count x (<u64 n><name n bytes> <u64 elements> <u64 byte offset in the weights>)
//       [when the weights symbol is empty: the weights, float32 LE]
//       <u64 FNV-1a 64 of every byte before it>
// All integers and floats little-endian, whatever the host. The weights are the constants' float32 values, each
// at its offset, zeros between (LayOut).
inline bool HostIsLittleEndian() {
  const uint32_t one = 1;
  unsigned char first;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

// `n` bytes of float32 values copied from `from` to `to`, each turned from host order to little-endian or back.
inline void CopyFloatsLE(char* to, const char* from, size_t n) {
  if (HostIsLittleEndian()) {
    std::memcpy(to, from, n);
    return;
  }
  for (size_t i = 0; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; ++k) to[i + k] = from[i + 3 - k];
}

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
  // The next `n` bytes, in place.
  const char* Take(uint64_t n, const char* what) {
    Need(n, what);
    const char* at = p_;
    p_ += n;
    return at;
  }

 private:
  const char* p_;
  const char* end_;
};


constexpr size_t kMagicSize = 8;

// A module blob of the runtime whose blobs start with `magic`. `weights` (the constants' bytes in host order,
// `ref.bytes` of them) are written into it when `ref.symbol` is empty, else only referred to.
inline std::string WriteBlob(const char (&magic)[kMagicSize], const std::string& symbol, const std::string& graph_json,
                             const std::vector<ConstEntry>& entries, const WeightsRef& ref, const char* weights) {
  Writer w;
  w.Raw(magic, kMagicSize);
  w.U32(kBlobVersion);
  w.U32(0);
  w.Str(symbol);
  w.Str(graph_json);
  w.Str(ref.symbol);
  w.U64(ref.bytes);
  w.U64(ref.checksum);
  w.U64(entries.size());
  for (const ConstEntry& e : entries) {
    w.Str(e.name);
    w.U64(e.count);
    w.U64(e.offset);
  }
  if (ref.symbol.empty()) {
    std::string le(ref.bytes, '\0');
    CopyFloatsLE(&le[0], weights, ref.bytes);
    w.Raw(le.data(), le.size());
  }
  return w.Finish();
}

// What a module blob holds. `inline_weights` points into the blob's bytes (little-endian floats) when they
// carry the weights, else is null and `ref` names the library section that does.
struct Blob {
  std::string symbol;
  std::string graph_json;
  std::vector<ConstEntry> entries;
  WeightsRef ref;
  const char* inline_weights = nullptr;
};

// The blob of `size` bytes at `data`, checked: the magic of runtime `name`, the checksum, the version and every
// length and offset (each constant inside the weights, aligned). Fails with what is wrong otherwise.
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
  blob.ref.symbol = r.Str("weights symbol");
  blob.ref.bytes = r.Uint(8, "weights size");
  blob.ref.checksum = r.Uint(8, "weights checksum");
  uint64_t count = r.Uint(8, "constant count");
  if (count > r.Remaining() / 24) Fail("corrupted module blob: constant count " + std::to_string(count) + " is impossible");
  for (uint64_t i = 0; i < count; ++i) {
    ConstEntry e;
    e.name = r.Str("constant name");
    e.count = r.Uint(8, "constant size");
    e.offset = r.Uint(8, "constant offset");
    if (e.offset % kWeightAlign != 0 || e.offset > blob.ref.bytes || e.count > (blob.ref.bytes - e.offset) / sizeof(float))
      Fail("corrupted module blob: constant " + e.name + " (" + std::to_string(e.count) + " values at byte " +
           std::to_string(e.offset) + ") lies outside the " + std::to_string(blob.ref.bytes) + " bytes of weights");
    blob.entries.push_back(std::move(e));
  }
  if (blob.ref.symbol.empty()) blob.inline_weights = r.Take(blob.ref.bytes, "weights");
  if (r.Remaining() != 0) Fail("corrupted module blob: " + std::to_string(r.Remaining()) + " unexpected trailing bytes");
  return blob;
}

}  // namespace graph_runtime
}  // namespace byoc

#endif  // BYOC_GRAPH_RUNTIME_BLOB_H_
