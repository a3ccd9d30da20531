// constants.cc -- constants: weights reordered once into the layouts their primitives chose.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "program.h"

namespace byoc {
namespace dnnl_runtime {

// A constant value in layout `desc` (reordered now, once, into memory the module owns). With `scales`, its
// real values are quantized on the way into desc's integer type: round(x / scale), a scale per index of
// `mask`'s axes (a unit's weight sent in real units: q * scale / scale is q again, exactly).
// The same constant seen the same way is reordered once: an unrolled recurrence reads its weights at every
// step (ddddocr's 32-step bidirectional LSTM made 300 MB of copies of 16 MB), and the programs of one module
// (one per shape of a graph with symbolic dims) share a graph constant's reorders through `shared_`.
int Program::ReorderConst(int v, const Desc& desc, const std::vector<double>& scales, int mask) {
  if (values_[v].desc == desc && scales.empty()) return v;
  std::ostringstream key;
  key << Root(v) << '/' << DescKey(values_[v].desc) << '/' << DescKey(desc) << '/' << mask << std::hexfloat;
  for (double s : scales) key << ',' << s;
  auto [kept, fresh] = const_reorders_.try_emplace(key.str(), -1);
  if (fresh) {
    auto reorder = [&] {
      return Reordered(memory(values_[v].desc, Engine(), consts_[values_[Root(v)].slot].get_data_handle()), desc,
                       scales, mask);
    };
    // a graph constant is the same in every program of the module
    kept->second = Root(v) < given_values_ ? KeepShared(key.str(), reorder) : KeepConst(reorder());
  }
  return kept->second;
}

// `source` reordered into new memory of layout `desc`, quantized by `scales` (if any) as for ReorderConst.
memory Program::Reordered(memory source, const Desc& desc, const std::vector<double>& scales, int mask) {
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

// What a qnn.conv*/qnn.matmul weight is quantized by on its way to s8: "w_scale" when it was sent in real units
// ("weight_real", with the float definition's weight it shares), nothing when sent as integers in float32.
std::vector<double> Program::WeightScales(const Attrs& a) {
  return a.Has("weight_real") && a.Bool("weight_real") ? a.Floats("w_scale") : std::vector<double>{};
}

// The s8 weights of a qnn.conv*/qnn.matmul in layout `desc` (WeightScales along `mask`).
int Program::QuantizedWeights(int v, const Desc& desc, const Attrs& a, int mask) {
  return ReorderConst(v, desc, WeightScales(a), mask);
}

// A constant this program made (its memory is owned here, and counted in ConstantBytes).
int Program::KeepConst(const memory& m) {
  consts_.push_back(m);
  owned_const_bytes_ += m.get_desc().get_size();
  return NewValue(m.get_desc(), Storage::kConst, static_cast<int>(consts_.size() - 1));
}

}  // namespace dnnl_runtime
}  // namespace byoc
