/*
 * graph_runtime/weights.h -- where a module's constants live, and how a kernel reads them.
 *
 * Every constant of a module is a float32 run at a 64-byte aligned offset in one block of bytes, its weights
 * (WeightsLayout). The block is either the module's own (a module created in this process, or loaded from a
 * blob that carries its weights) or the weights section of the library it was exported into: a symbol of the
 * shared library, mapped from the file by the dynamic loader and read in place (WeightsSection). A graph reads
 * a constant through a ConstSpan; a kernel that keeps only a reordered copy of a mapped constant gives the
 * original's pages back (ReleasePages): the file holds them, and a later reader faults them in again.
 */
#ifndef BYOC_GRAPH_RUNTIME_WEIGHTS_H_
#define BYOC_GRAPH_RUNTIME_WEIGHTS_H_

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base.h"

namespace byoc {
namespace graph_runtime {

// Where each constant starts in the weights: a multiple of this, so a kernel reading a mapped constant in
// place finds it aligned as oneDNN's own allocations are.
constexpr size_t kWeightAlign = 64;

// One constant as a graph reads it: `count` float32 values at `ptr`. `mapped`: they are pages of the library
// file, which ReleasePages may give back.
struct ConstSpan {
  const float* ptr = nullptr;
  size_t count = 0;
  bool mapped = false;
  const float* data() const { return ptr; }
  size_t size() const { return count; }
  bool empty() const { return count == 0; }
  const float& operator[](size_t i) const { return ptr[i]; }
};

// The block of bytes a module's constants are in: owned (aligned, freed with it) or a library's weights section
// (the library held open while this lives).
class WeightsBlock {
 public:
  // `bytes` of zeroed memory of the module's own.
  static std::shared_ptr<WeightsBlock> Owned(size_t bytes) {
    auto block = std::shared_ptr<WeightsBlock>(new WeightsBlock());
    size_t rounded = (bytes + kWeightAlign - 1) / kWeightAlign * kWeightAlign;
    block->data_ = static_cast<char*>(std::aligned_alloc(kWeightAlign, rounded ? rounded : kWeightAlign));
    if (!block->data_) Fail("cannot allocate " + std::to_string(bytes) + " bytes for the module's constants");
    std::memset(block->data_, 0, rounded);
    block->size_ = bytes;
    block->owned_ = true;
    return block;
  }

  // The symbol `symbol` of `bytes` bytes, defined by a shared library loaded in this process (the library
  // being loaded defines it; another that defines the same name holds the same bytes, as the name is their
  // checksum, which the caller checks). Fails, naming the symbol, when no loaded library has it at that size.
  static std::shared_ptr<WeightsBlock> Section(const std::string& symbol, size_t bytes) {
    std::vector<std::string> names;
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* out) {
          if (info->dlpi_name && info->dlpi_name[0]) static_cast<std::vector<std::string>*>(out)->push_back(info->dlpi_name);
          return 0;
        },
        &names);
    // The first library loaded that defines it: two artifacts of one model (two batch sizes) then read one
    // library's weights, and their reordered copies, kept by address (dnnl's SharedConsts), are made once.
    for (auto name = names.begin(); name != names.end(); ++name) {
      void* handle = dlopen(name->c_str(), RTLD_LAZY | RTLD_NOLOAD);
      if (!handle) continue;
      void* found = dlsym(handle, symbol.c_str());
      void* entry = nullptr;  // the symbol's ELF entry, for its size
      Dl_info where;
      if (found && dladdr1(found, &where, &entry, RTLD_DL_SYMENT) && entry &&
          static_cast<const ElfW(Sym)*>(entry)->st_size == bytes) {
        auto block = std::shared_ptr<WeightsBlock>(new WeightsBlock());
        block->data_ = static_cast<char*>(found);
        block->size_ = bytes;
        block->handle_ = handle;
        return block;
      }
      dlclose(handle);
    }
    Fail("the weights section " + symbol + " (" + std::to_string(bytes) +
         " bytes) is in no library loaded in this process: the module blob was saved without its library "
         "(load the exported library itself with byoc.load)");
  }

  ~WeightsBlock() {
    if (owned_) std::free(data_);
    if (handle_) dlclose(handle_);
  }
  WeightsBlock(const WeightsBlock&) = delete;
  WeightsBlock& operator=(const WeightsBlock&) = delete;

  char* data() const { return data_; }
  size_t size() const { return size_; }
  // Pages of a library file, read in place (else memory of the module's own).
  bool mapped() const { return !owned_; }

 private:
  WeightsBlock() = default;
  char* data_ = nullptr;
  size_t size_ = 0;
  bool owned_ = false;
  void* handle_ = nullptr;
};

// Gives back to the kernel the pages wholly inside [p, p + bytes) of a read-only file mapping: they leave the
// process's resident set, and a later read faults them in from the file again. Pages a neighbour shares are kept.
inline void ReleasePages(const void* p, size_t bytes) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

// A 64-bit checksum of `n` bytes, fast enough to read every weight at load: four FNV-1a lanes over 8-byte
// little-endian words, then the tail bytes, folded together with the length.
inline uint64_t WeightsChecksum(const char* data, size_t n) {
  constexpr uint64_t kPrime = 1099511628211ULL;
  uint64_t lane[4] = {1469598103934665603ULL, 0x9e3779b97f4a7c15ULL, 0xc2b2ae3d27d4eb4fULL, 0x165667b19e3779f9ULL};
  auto word = [](const char* p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
    return v;
  };
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) lane[k] = (lane[k] ^ word(data + i + 8 * k)) * kPrime;
  uint64_t h = lane[0] ^ (lane[1] * 3) ^ (lane[2] * 5) ^ (lane[3] * 7) ^ n;
  for (; i < n; ++i) h = (h ^ static_cast<unsigned char>(data[i])) * kPrime;
  return h;
}

}  // namespace graph_runtime
}  // namespace byoc

#endif  // BYOC_GRAPH_RUNTIME_WEIGHTS_H_
