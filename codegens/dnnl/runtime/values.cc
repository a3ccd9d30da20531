// values.cc -- the value table (ValueTable): the values of a program and their layouts, and its constants: the
// module's, used in place, and weights reordered once into the layouts their primitives chose.
#include <sstream>

#include "values.h"

namespace byoc {
namespace dnnl_runtime {

ValueTable::ValueTable(const ParsedGraph& graph, std::shared_ptr<SharedConsts> shared)
    : value_of_(graph.tensors().size(), -1), shared_(std::move(shared)) {
  for (size_t slot = 0; slot < graph.inputs().size(); ++slot) {
    int id = graph.inputs()[slot];
    value_of_[id] = New(Plain(graph.Shape(id), DataType(graph.tensor(id))), Storage::kInput, static_cast<int>(slot));
  }
  for (size_t id = 0; id < graph.tensors().size(); ++id) {
    if (graph.tensor(id).kind == Kind::kConst) {
      const ConstSpan& data = graph.const_data(static_cast<int>(id));
      if (data.empty()) Fail("constant " + graph.tensor(id).name + " is empty (zero-sized tensors are not supported)");
      Desc desc = Plain(graph.Shape(id));
      consts_.push_back(memory(desc, Engine(), const_cast<float*>(data.data())));
      value_of_[id] = New(desc, Storage::kConst, static_cast<int>(consts_.size() - 1));
      given_consts_[value_of_[id]] = data;
    }
  }
  given_ = static_cast<int>(values_.size());
}

int ValueTable::New(const Desc& desc, Storage storage, int slot) {
  values_.push_back({desc, storage, slot});
  return static_cast<int>(values_.size() - 1);
}

int ValueTable::View(int v, const Desc& desc, size_t offset) {
  values_.push_back({desc, Storage::kTemp, -1, Root(v), values_[v].offset + offset});
  return static_cast<int>(values_.size() - 1);
}

std::string DescKey(const Desc& d) {
  std::ostringstream os;
  for (auto x : d.get_dims()) os << x << ',';
  os << '|' << static_cast<int>(d.get_data_type()) << '|' << static_cast<int>(d.get_format_kind()) << '|';
  if (d.get_format_kind() == memory::format_kind::blocked) {
    for (auto x : d.get_strides()) os << x << ',';
    os << '|';
    for (auto x : d.get_inner_blks()) os << x << ',';
    os << '|';
    for (auto x : d.get_inner_idxs()) os << x << ',';
  }
  return os.str();
}

// -- constants ---------------------------------------------------------------------------------
// A constant value in layout `desc` (reordered now, once, into memory the module owns). With `scales`, its
// real values are quantized on the way into desc's integer type: round(x / scale), a scale per index of
// `mask`'s axes (a unit's weight sent in real units: q * scale / scale is q again, exactly).
// The same constant seen the same way is reordered once: an unrolled recurrence reads its weights at every
// step (ddddocr's 32-step bidirectional LSTM made 300 MB of copies of 16 MB), and the programs of one module
// (one per shape of a graph with symbolic dims) share a graph constant's reorders through `shared_`.
int ValueTable::ReorderConst(int v, const Desc& desc, const std::vector<double>& scales, int mask) {
  if (values_[v].desc == desc && scales.empty()) return v;
  // a graph constant, or one made from graph constants alone for every program (KeepShared: a weight
  // dequantized at load), is the same in every program of the module
  auto made_shared = shared_keys_.find(Root(v));
  bool shared = Root(v) < given_ || made_shared != shared_keys_.end();
  std::ostringstream key;
  key << (made_shared != shared_keys_.end() ? made_shared->second
                                            : Root(v) < given_ ? GivenKey(Root(v)) : std::to_string(Root(v))) << '/'
      << DescKey(values_[v].desc) << '/' << DescKey(desc) << '/' << mask << std::hexfloat;
  for (double s : scales) key << ',' << s;
  auto [kept, fresh] = const_reorders_.try_emplace(key.str(), -1);
  if (fresh) {
    auto reorder = [&] {
      return Reordered(memory(values_[v].desc, Engine(), ConstData(values_[Root(v)].slot)), desc, scales, mask);
    };
    kept->second = shared ? KeepShared(key.str(), reorder) : KeepConst(reorder());
    // A weight of the library file, read: its pages go now rather than once the program is final, so loading
    // never holds the file's copy of every weight beside the reordered ones (a step that reads it in place
    // faults them in again, and SettleGiven copies it).
    auto given = given_consts_.find(Root(v));
    if (given != given_consts_.end() && given->second.mapped)
      ReleasePages(given->second.data(), given->second.size() * sizeof(float));
  }
  return kept->second;
}

// `source` reordered into new memory of layout `desc`, quantized by `scales` (if any) as for ReorderConst.
memory ValueTable::Reordered(memory source, const Desc& desc, const std::vector<double>& scales, int mask) {
  memory converted(desc, Engine());
  dnnl::stream stream(Engine());
  if (scales.empty()) {
    dnnl::reorder(source, converted).execute(stream, source, converted);
  } else {
    primitive_attr attr;
    attr.set_scales_mask(DNNL_ARG_DST, scales.size() > 1 ? mask : 0);
    std::vector<float> values(scales.begin(), scales.end());
    memory scale(Desc({static_cast<int64_t>(values.size())}, memory::data_type::f32, memory::format_tag::a),
                 Engine(), values.data());
    dnnl::reorder::primitive_desc pd(Engine(), source.get_desc(), Engine(), desc, attr);
    dnnl::reorder(pd).execute(stream, {{DNNL_ARG_FROM, source}, {DNNL_ARG_TO, converted},
                                       {DNNL_ARG_ATTR_SCALES | DNNL_ARG_DST, scale}});
  }
  stream.wait();
  return converted;
}

std::string ValueTable::GivenKey(int v) const {
  const ConstSpan& span = given_consts_.at(v);
  std::ostringstream key;
  key << '@' << static_cast<const void*>(span.data()) << ':' << span.size() * sizeof(float);
  return key.str();
}

void ValueTable::SettleGiven(const std::set<int>& read) {
  for (const auto& [v, span] : given_consts_) {
    if (!span.mapped) continue;
    size_t bytes = span.size() * sizeof(float);
    if (read.count(v)) {  // read in place: from a copy, shared by every program and module that reads it so
      const Desc desc = values_[v].desc;
      auto copy = [&] {
        memory m(desc, Engine());
        std::memcpy(m.get_data_handle(), span.data(), bytes);
        return m;
      };
      bool made = true;
      if (shared_) {
        shared_held_.push_back(shared_->Get(GivenKey(v) + "/copy", copy, &made));
        consts_[values_[v].slot] = *shared_held_.back();
      } else {
        consts_[values_[v].slot] = copy();
      }
      if (made) owned_const_bytes_ += bytes;
    }
    ReleasePages(span.data(), bytes);
  }
}

void ValueTable::ReleaseUnread(const std::set<int>& read) {
  for (const auto& [v, held] : shared_of_) {
    if (read.count(v) || !shared_held_[held.first]) continue;
    if (held.second) owned_const_bytes_ -= values_[v].desc.get_size();
    consts_[values_[v].slot] = memory();
    shared_held_[held.first].reset();
  }
}

// A constant this program made (its memory is owned here, and counted in OwnedConstBytes).
int ValueTable::KeepConst(const memory& m) {
  consts_.push_back(m);
  owned_const_bytes_ += m.get_desc().get_size();
  return New(m.get_desc(), Storage::kConst, static_cast<int>(consts_.size() - 1));
}

}  // namespace dnnl_runtime
}  // namespace byoc
