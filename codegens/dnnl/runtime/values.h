// values.h -- the values of a program and their layouts (ValueTable): which buffer holds each graph tensor as
// computed, in which oneDNN layout, and the constants (the module's, and the weights reordered for primitives).
// Op lowerings read and define values here; where a value's bytes live at run time is the step plan's business
// (step_plan.h).
#ifndef BYOC_DNNL_VALUES_H_
#define BYOC_DNNL_VALUES_H_

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common.h"

namespace byoc {
namespace dnnl_runtime {

// Weights reordered for the programs of one module: the specializations of a graph with symbolic dims
// (one program per shape) share each constant they reorder into the same layout. A reorder lives as long as
// a program holds it: the shape cache evicts programs, and a layout only evicted shapes chose goes with them
// (else every layout any shape ever chose stayed: ResNet-18's memory grew 27 MB per 10 new shapes). A key that
// starts with '@' names its source by address (ValueTable::GivenKey): such reorders are shared by every module of
// the process, so two artifacts of one model (two batch sizes, two thread counts, a reload), whose modules read
// one library's weights in place, hold each reordered weight once. Thread safe.
class SharedConsts {
 public:
  // The memory kept under `key`, or `make()`'s, kept now; `*made` says which. The caller holds it.
  template <class Make>
  std::shared_ptr<memory> Get(const std::string& key, Make make, bool* made) {
    if (!key.empty() && key[0] == '@' && this != &Process()) return Process().Get(key, make, made);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (std::shared_ptr<memory> kept = Alive(key)) {
        *made = false;
        return kept;
      }
    }
    auto m = std::make_shared<memory>(make());
    std::lock_guard<std::mutex> lock(mutex_);
    if (std::shared_ptr<memory> kept = Alive(key)) {  // another thread made it meanwhile
      *made = false;
      return kept;
    }
    kept_[key] = m;
    *made = true;
    return m;
  }

 private:
  // The reorders of the process's constants known by address.
  static SharedConsts& Process() {
    static SharedConsts* process = new SharedConsts();  // never destroyed: modules may outlive static destructors
    return *process;
  }

  std::shared_ptr<memory> Alive(const std::string& key) {
    auto it = kept_.find(key);
    if (it == kept_.end()) return nullptr;
    std::shared_ptr<memory> m = it->second.lock();
    if (!m) kept_.erase(it);
    return m;
  }

  std::mutex mutex_;
  std::map<std::string, std::weak_ptr<memory>> kept_;
};

// A key that tells oneDNN memory descs apart: dims, data type and, for a blocked layout, strides and blocks.
std::string DescKey(const Desc& d);

// The values of one program: value ids index it, graph tensors map to the value that holds them as computed.
// Values [0, given) are the graph's inputs and constants, made by the constructor, alike in every program.
class ValueTable {
 public:
  // The graph's inputs (plain, at the caller's buffers) and constants (plain, the module's data, used in place).
  // `shared`, when given, holds the weights reordered by the other programs of the module (and takes these).
  ValueTable(const ParsedGraph& graph, std::shared_ptr<SharedConsts> shared);

  // -- reading --
  const Value& operator[](int v) const { return values_[v]; }
  int size() const { return static_cast<int>(values_.size()); }
  // The value that holds graph tensor `id` as computed, or -1 before it is.
  int of(int id) const { return value_of_[id]; }
  // The layout graph tensor `id` is computed in.
  const Desc& DescOf(int id) const { return values_[value_of_[id]].desc; }
  // The value that owns the buffer `v` reads: itself, or what it is a view of.
  int Root(int v) const { return values_[v].base >= 0 ? values_[v].base : v; }
  Storage StorageOf(int v) const { return values_[Root(v)].storage; }

  // -- defining --
  int New(const Desc& desc, Storage storage, int slot = -1);
  // The buffer of `v` seen as `desc` (same bytes: a reshape), or the part of it `offset` bytes in.
  int View(int v, const Desc& desc, size_t offset = 0);
  // Graph tensor `id` is now held by value `v` (-1: no longer computed).
  void Bind(int id, int v) { value_of_[id] = v; }

  // -- constants --
  // The same constant bytes seen with other dims (a group axis, leading 1s).
  int ConstView(int v, const Desc& desc) { return values_[v].desc == desc ? v : View(v, desc); }
  // Constant value `v` in layout `desc`, reordered once (and quantized by `scales` along `mask`): constants.cc.
  int ReorderConst(int v, const Desc& desc, const std::vector<double>& scales = {}, int mask = 0);
  // `source` reordered into new memory of layout `desc`, quantized by `scales` (if any) as for ReorderConst.
  static memory Reordered(memory source, const Desc& desc, const std::vector<double>& scales = {}, int mask = 0);
  // A constant this program made (its memory is owned here, and counted in OwnedConstBytes).
  int KeepConst(const memory& m);
  // A constant made from graph constants only (`make()`), kept under `key` for every program of the module
  // (shared_), or for this one when there is none: a weight reordered or transformed for a primitive.
  template <class Make>
  int KeepShared(const std::string& key, Make make) {
    if (!shared_) return KeepConst(make());
    bool made = false;
    shared_held_.push_back(shared_->Get(key, make, &made));
    const memory& m = *shared_held_.back();
    consts_.push_back(m);
    if (made) owned_const_bytes_ += m.get_desc().get_size();  // counted by the program that made it
    int v = New(m.get_desc(), Storage::kConst, static_cast<int>(consts_.size() - 1));
    shared_keys_[v] = key;
    shared_of_[v] = {shared_held_.size() - 1, made};
    return v;
  }
  // The key that names the graph's constant value `v` (one of [0, given)) by where its bytes are, "@<address>:<bytes>":
  // what its reorders are kept under, for every module of the process (SharedConsts).
  std::string GivenKey(int v) const;
  // Where the graph's constants are pages of the library file (weights.h): gives those pages back, each constant a
  // step reads (`read`, by Root) read from a copy instead. So a run keeps each weight once, in the layout its step
  // reads: the file's pages are not resident beside the reordered copies (a fault on a weight read in place maps
  // the page cache's whole large folio, and with it the neighbours only reordered: 15 of ViT-S's 28 MB of
  // reordered weights came back so). Once the program is final (workspaces bind the constants' memory).
  void SettleGiven(const std::set<int>& read);
  // Lets go of the constants KeepShared made that no step reads (`read`: the values the steps read, by Root): a
  // weight dequantized at load once its primitive's layout is reordered from it. Another program needing it
  // again makes it again. Once the program is final.
  void ReleaseUnread(const std::set<int>& read);
  // oneDNN's quantization: real = scale * (q - zero_point). Scales and zero points are
  // execution arguments; the module keeps them as constants.
  template <class T>
  int OwnedConst(const std::vector<T>& values, memory::data_type type) {
    Desc desc({static_cast<int64_t>(values.size())}, type, memory::format_tag::a);
    memory m(desc, Engine());
    std::memcpy(m.get_data_handle(), values.data(), values.size() * sizeof(T));
    return KeepConst(m);
  }
  // The data of constant slot `slot` (a Value's slot where its storage is kConst).
  void* ConstData(int slot) const { return consts_[slot].get_data_handle(); }
  // Bytes of the constants this program made (weights reordered for its primitives).
  size_t OwnedConstBytes() const { return owned_const_bytes_; }

 private:
  friend class StepPlan;  // which alone places values
  // Where value `v`'s bytes are: the step plan places outputs (kOutput, slot) and temps (kTemp, arena offset).
  void Place(int v, Storage storage, int slot) {
    values_[v].storage = storage;
    values_[v].slot = slot;
  }

  std::vector<int> value_of_;  // graph tensor -> its value as computed
  std::vector<Value> values_;
  std::vector<memory> consts_;  // module-owned (reordered weights) or views of the module's constants
  std::map<std::string, int> const_reorders_;  // (constant, view, layout, scales) -> value
  std::shared_ptr<SharedConsts> shared_;  // the module's weights reordered once for all its programs (or null)
  std::vector<std::shared_ptr<memory>> shared_held_;  // what this program takes from shared_: alive while it is
  std::map<int, std::string> shared_keys_;  // a value KeepShared made -> its key (what its reorders are keyed by)
  std::map<int, std::pair<size_t, bool>> shared_of_;  // a value KeepShared made -> (its shared_held_ index, made here)
  int given_ = 0;  // values [0, given_) are the graph's inputs and constants, alike in every program
  std::map<int, ConstSpan> given_consts_;  // a graph constant's value -> its bytes
  size_t owned_const_bytes_ = 0;
};

}  // namespace dnnl_runtime
}  // namespace byoc

#endif  // BYOC_DNNL_VALUES_H_
