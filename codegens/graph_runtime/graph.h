/*
 * graph_runtime/graph.h -- a partition graph parsed from its JSON and validated (ParsedGraph): its tensors
 * (TensorInfo), its ops (BodyOp), its symbolic dims and how a call binds them, and the shape checks every
 * executor shares (broadcasting, axes, a convolution's geometry).
 *
 * The graph JSON schema is documented in byoc/codegens/json_runtime/serializer.py.
 */
#ifndef BYOC_GRAPH_RUNTIME_GRAPH_H_
#define BYOC_GRAPH_RUNTIME_GRAPH_H_

#include <tvm/ffi/extra/json.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "json.h"
#include "weights.h"

namespace byoc {
namespace graph_runtime {

constexpr int64_t kGraphVersion = 4;  // newest "version" of the graph JSON; an Executor reads from its kMinGraphVersion
// The rank limit of the kernels and the vendors' rules: written once, in c_source/byoc_kernels.h, and handed
// to the compiler by setup.py (codegens/limits.py reads it for Python).
#ifndef BYOC_MAX_RANK
#error "BYOC_MAX_RANK is defined by setup.py from c_source/byoc_kernels.h (codegens/limits.py)"
#endif
constexpr size_t kMaxRank = BYOC_MAX_RANK;

// -- symbolic dims (schema 4) ---------------------------------------------------------------------
// A dim of a tensor's "shape" is an int, the name of a symbolic dim ("batch"), or [op, a, b] with op one of
// + - * // % min max (codegens/json_runtime/serializer.py writes them from TIR's shape arithmetic).
using DimEnv = std::map<std::string, int64_t, std::less<>>;  // std::less<>: looked up by a string_view too

inline int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

// The size of dim `d` where the symbolic dims have the sizes `env`.
inline int64_t EvalDim(const Any& d, const DimEnv& env, const std::string& where) {
  if (auto i = d.try_cast<int64_t>()) return *i;
  if (auto name = d.try_cast<String>()) {
    auto it = env.find(std::string_view(name->data(), name->size()));
    if (it == env.end()) Fail(where + ": symbolic dim " + std::string(*name) + " is not bound by the inputs");
    return it->second;
  }
  JArray e = AsArray(d, where);
  if (e.size() != 3) Fail(where + ": a dim expression is [op, a, b]");
  std::string op = AsString(e[0], where + " op");
  int64_t a = EvalDim(e[1], env, where), b = EvalDim(e[2], env, where);
  if (op == "+") return a + b;
  if (op == "-") return a - b;
  if (op == "*") return a * b;
  if (op == "min") return std::min(a, b);
  if (op == "max") return std::max(a, b);
  if (op == "//" || op == "%") {
    if (b == 0) Fail(where + ": division by zero in a dim expression");
    return op == "//" ? FloorDiv(a, b) : a - FloorDiv(a, b) * b;
  }
  Fail(where + ": unknown dim operator " + op);
}

// -- the graph -----------------------------------------------------------------------------------
enum class Kind { kInput, kConst, kOp };

struct TensorInfo {
  std::string name;
  Kind kind;
  std::string dtype;  // float32; uint8 or int8 where an executor takes quantized tensors
  std::vector<int64_t> shape;  // -1 for a symbolic dim in a graph not yet specialized
  int64_t numel = 1;
  int slot = -1;  // input index, constant index, or -1
  JArray dims;    // the dims as written (ints, names, expressions)
};
inline std::string ShapeStr(const std::vector<int64_t>& s) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << (s.size() == 1 ? ",)" : ")");
  return os.str();
}

inline int64_t NormAxis(int64_t axis, size_t ndim, const std::string& where) {
  int64_t n = static_cast<int64_t>(ndim);
  if (axis < -n || axis >= n) Fail(where + ": axis " + std::to_string(axis) + " out of range");
  return axis < 0 ? axis + n : axis;
}

inline std::vector<int64_t> Broadcast(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                               const std::string& where) {
  size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x != y && x != 1 && y != 1) Fail(where + ": shapes " + ShapeStr(a) + " and " + ShapeStr(b) + " do not broadcast");
    out[i] = x == 1 ? y : x;
  }
  return out;
}
// conv1d/conv2d attributes checked against its tensors: NCW/OIW or NCHW/OIHW
// (`spatial` 1 or 2 dims, as the kernel's name says), channels that fit the
// groups, and an output shape that follows from strides, padding and dilation.
// Every runtime checks this before computing anything.
struct ConvGeometry {
  int64_t groups;
  std::vector<int64_t> strides, dilation;  // one per spatial dim: (w) or (h, w)
  std::vector<int64_t> padding;            // begins then ends: (left, right) or (top, left, bottom, right)
};

inline ConvGeometry CheckConv(const Attrs& a, const std::vector<int64_t>& x, const std::vector<int64_t>& w,
                              const std::vector<int64_t>& y, size_t spatial, const std::string& where) {
  const std::string data = spatial == 1 ? "NCW" : "NCHW", kernel = spatial == 1 ? "OIW" : "OIHW";
  if (a.Str("data_layout") != data || a.Str("kernel_layout") != kernel || a.Str("out_layout") != data)
    Fail(where + ": only " + data + "/" + kernel + " layouts are supported");
  if (x.size() != spatial + 2 || w.size() != spatial + 2 || y.size() != spatial + 2)
    Fail(where + ": conv" + std::to_string(spatial) + "d tensors must be " + std::to_string(spatial + 2) + "-D");
  ConvGeometry g{a.Int("groups"), a.Ints("strides"), a.Ints("dilation"), a.Ints("padding")};
  if (g.strides.size() != spatial || g.dilation.size() != spatial ||
      (g.padding.size() != 2 * spatial && g.padding.size() != spatial))
    Fail(where + ": strides/dilation need one value per spatial dim and padding one or two");
  if (g.padding.size() == spatial) g.padding.insert(g.padding.end(), g.padding.begin(), g.padding.end());
  for (int64_t v : g.strides) if (v < 1) Fail(where + ": strides must be positive");
  for (int64_t v : g.dilation) if (v < 1) Fail(where + ": dilation must be positive");
  for (int64_t v : g.padding) if (v < 0) Fail(where + ": padding must not be negative");
  if (g.groups < 1 || x[1] != w[1] * g.groups || w[0] % g.groups != 0 || y[0] != x[0] || y[1] != w[0])
    Fail(where + ": channels of " + ShapeStr(x) + " and weight " + ShapeStr(w) + " do not match groups=" +
         std::to_string(g.groups));
  for (size_t d = 0; d < spatial; ++d) {
    int64_t span = g.dilation[d] * (w[2 + d] - 1) + 1;
    if (y[2 + d] != (x[2 + d] + g.padding[d] + g.padding[d + spatial] - span) / g.strides[d] + 1)
      Fail(where + ": output shape " + ShapeStr(y) + " does not follow from the attributes");
  }
  return g;
}

// One primitive op of a node body, with its tensors resolved to ids.
struct BodyOp {
  std::string kernel;          // the Relax op name, e.g. "relax.nn.conv2d"
  std::vector<int> inputs;     // tensor ids read
  int output;                  // tensor id written
  JObject attrs;
  std::string where;           // "node #3 (dnnl.conv2d_bias) body[1] relax.add", for errors
  int node;                    // index of the node (rule match) the op belongs to
  std::string rule;            // that node's "op": the vendor rule
};

// A partition graph parsed from its JSON and validated: every tensor is
// declared once with a valid shape, inputs and constants are listed and have
// data, every op reads only tensors computed before it and writes a new one.
//
// An op whose attribute "only_if_cpu" names a feature the executing CPU lacks
// (`cpu_features` does not hold it) is left out, here, before anything reads
// the graph: a graph may hold two ways to compute one tensor and keep the one
// this CPU runs best (dnnl: an int8 unit that is exact only with VNNI, and its
// float definition for CPUs without).
class ParsedGraph {
 public:
  // `env` gives the symbolic dims their sizes (a specialization); without it a graph with symbolic dims
  // is parsed as a template: symbolic() says so, its shapes hold -1 there, and Bind() sizes a call.
  ParsedGraph(const std::string& symbol, const std::string& text,
              const std::map<std::string, ConstSpan>& consts,
              const std::set<std::string>& cpu_features = {}, int64_t min_version = 1, const DimEnv* env = nullptr)
      : cpu_features_(cpu_features), env_(env) {
    CheckJsonDepth(text);
    String error;
    Any root = tvm::ffi::json::Parse(String(text), &error);
    if (error.size() != 0) Fail("graph JSON does not parse: " + std::string(error));
    JObject g = AsObject(root, "graph");
    if (AsString(Field(g, "format", "graph"), "graph format") != "byoc.json_runtime.graph")
      Fail("graph format is not byoc.json_runtime.graph");
    version_ = AsInt(Field(g, "version", "graph"), "graph version");
    if (version_ < min_version || version_ > kGraphVersion)
      Fail("graph schema version " + std::to_string(version_) + " is not supported (this runtime reads " +
           std::to_string(min_version) + " to " + std::to_string(kGraphVersion) + "): the artifact was built by " +
           (version_ < min_version ? "an earlier" : "a later") + " byoc; rebuild it with this byoc version");
    if (AsString(Field(g, "symbol", "graph"), "graph symbol") != symbol)
      Fail("graph symbol does not match the module symbol " + symbol);
    auto options = g.find(Any(String("options")));  // a vendor's settings, typed like attributes (optional)
    if (options != g.end()) options_ = AsObject((*options).second, "graph options");
    ParseTensors(AsArray(Field(g, "tensors", "graph"), "graph tensors"));
    if (symbolic_ && version_ < 4) Fail("a symbolic dim appears in a graph of schema version " + std::to_string(version_));
    ParseInputsAndConstants(g, consts);
    auto shape_args = g.find(Any(String("shape_arguments")));
    if (shape_args != g.end()) ParseShapeArguments(AsArray((*shape_args).second, "graph shape_arguments"));
    if (symbolic_) CheckDimsBound();
    ParseNodes(AsArray(Field(g, "nodes", "graph"), "graph nodes"));
    JArray outputs = AsArray(Field(g, "outputs", "graph"), "graph outputs");
    for (size_t i = 0; i < outputs.size(); ++i) {
      int id = Lookup(AsString(outputs[i], "graph output"), "graph outputs");
      if (!produced_[id]) Fail("graph output " + tensors_[id].name + " is never computed");
      outputs_.push_back(id);
    }
    uses_.assign(tensors_.size(), 0);
    for (const BodyOp& op : ops_)
      for (int id : op.inputs) ++uses_[id];
    for (int id : outputs_) ++uses_[id];
  }

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo& tensor(int id) const { return tensors_[id]; }
  const std::vector<int64_t>& Shape(int id) const { return tensors_[id].shape; }
  const std::vector<BodyOp>& ops() const { return ops_; }
  const std::vector<int>& inputs() const { return inputs_; }
  const std::vector<int>& outputs() const { return outputs_; }
  // Readers of a tensor: ops reading it plus one per listing as graph output.
  int uses(int id) const { return uses_[id]; }
  const ConstSpan& const_data(int id) const { return const_data_[tensors_[id].slot]; }
  // The vendor options the graph was built with ({} in graphs that carry none).
  Attrs options() const { return Attrs(options_, "graph options"); }
  // Boolean option `key`, or `otherwise` when the graph does not set it.
  bool BoolOption(const char* key, bool otherwise) const {
    Attrs a = options();
    return a.Has(key) ? a.Bool(key) : otherwise;
  }
  int64_t IntOption(const char* key, int64_t otherwise) const {
    Attrs a = options();
    return a.Has(key) ? a.Int(key) : otherwise;
  }
  // Each shape argument: its position among the call's arguments (inputs and shapes) and the dims it gives.
  const std::vector<std::pair<int, std::vector<std::string>>>& shape_arguments() const { return shape_args_; }
  // Whether a tensor has a symbolic dim (and this is a template, not a specialization).
  bool symbolic() const { return symbolic_; }
  // The symbolic dims, named in sorted order: a specialization's key lists their sizes in this order.
  const std::vector<std::string>& dim_names() const { return dim_names_; }

  // The sizes of the symbolic dims in a call whose input `i` has shape shapes[i] (rank ranks[i]): each
  // input's static dims must match, each dim named in several places must agree, and each computed one
  // must equal its expression. Throws a ValueError naming the input and the dim otherwise.
  // `given` are the sizes the shape arguments carry.
  DimEnv Bind(const std::string& symbol, const int64_t* const* shapes, const int* ranks, DimEnv given = {}) const {
    // Called on every call of a symbolic partition: the messages' strings are made only when one is thrown.
    DimEnv env = std::move(given);
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const TensorInfo& t = tensors_[inputs_[i]];
      if (static_cast<size_t>(ranks[i]) != t.dims.size())
        TVM_FFI_THROW(ValueError) << symbol << ": argument " << i << " has rank " << ranks[i] << ", expected "
                                  << t.dims.size();
      for (size_t d = 0; d < t.dims.size(); ++d) {
        auto name = t.dims[d].try_cast<String>();
        if (!name.has_value()) continue;
        auto it = env.find(std::string_view(name->data(), name->size()));
        if (it == env.end()) {
          env.emplace(std::string(*name), shapes[i][d]);
        } else if (it->second != shapes[i][d]) {
          TVM_FFI_THROW(ValueError) << symbol << ": argument " << i << " has " << std::string(*name) << " = "
                                    << shapes[i][d] << " (shape "
                                    << ShapeStr(std::vector<int64_t>(shapes[i], shapes[i] + ranks[i]))
                                    << "), another input has " << it->second;
        }
      }
    }
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const TensorInfo& t = tensors_[inputs_[i]];
      for (size_t d = 0; d < t.dims.size(); ++d) {
        const Any& dim = t.dims[d];
        if (dim.try_cast<String>().has_value()) continue;  // a named dim: the loop above bound and checked it
        auto number = dim.try_cast<int64_t>();
        int64_t want = number ? *number : EvalDim(dim, env, symbol + ": argument " + std::to_string(i));
        if (want != shapes[i][d])
          TVM_FFI_THROW(ValueError) << symbol << ": argument " << i << " has " << shapes[i][d] << " in dim " << d
                                    << ", expected " << want;
      }
    }
    return env;
  }

 private:
  int Lookup(const std::string& name, const std::string& where) const {
    auto it = index_.find(name);
    if (it == index_.end()) Fail(where + " names an undeclared tensor " + name);
    return it->second;
  }

  void ParseTensors(const JArray& tensors) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      std::string where = "tensor #" + std::to_string(i);
      JObject t = AsObject(tensors[i], where);
      TensorInfo info;
      info.name = AsString(Field(t, "name", where), where + " name");
      where = "tensor " + info.name;
      std::string kind = AsString(Field(t, "kind", where), where + " kind");
      info.kind = kind == "input" ? Kind::kInput : kind == "const" ? Kind::kConst : Kind::kOp;
      if (kind != "input" && kind != "const" && kind != "op") Fail(where + " has unknown kind " + kind);
      info.dtype = AsString(Field(t, "dtype", where), where + " dtype");
      // Constants travel as float32 (an 8-bit weight as its bytes in a float32 constant a quarter as long, which
      // the dnnl runtime reads back: codegens/dnnl/dynamic.py); an executor that has no 8-bit kernels refuses the
      // other dtypes.
      // bool and int64 come in as the masks and indices of glue the dnnl runtime computes (Where, GatherElements).
      bool other = info.dtype == "uint8" || info.dtype == "int8" || info.dtype == "bool" || info.dtype == "int64";
      if (info.dtype != "float32" && !(other && info.kind != Kind::kConst))
        Fail(where + " has dtype " + info.dtype + " (float32, and uint8/int8/bool/int64 for non-constants, only)");
      info.dims = AsArray(Field(t, "shape", where), where + " shape");
      if (info.dims.size() > kMaxRank) Fail(where + " has rank above " + std::to_string(kMaxRank));
      bool sized = true;
      for (size_t k = 0; k < info.dims.size(); ++k) {
        bool number = info.dims[k].try_cast<int64_t>().has_value();
        if (!number && !env_) {  // a template: the dim is sized per call
          if (info.kind == Kind::kConst) Fail(where + " is a constant with a symbolic dim");
          CollectDimNames(info.dims[k], where);
          info.shape.push_back(-1);
          symbolic_ = true;
          sized = false;
          continue;
        }
        int64_t d = number ? AsInt(info.dims[k], where + " shape") : EvalDim(info.dims[k], *env_, where + " shape");
        if (d < 0 || (d > 0 && info.numel > (int64_t{1} << 40) / d)) Fail(where + " has an invalid shape");
        info.shape.push_back(d);
        info.numel *= d;
      }
      if (!sized) info.numel = -1;
      if (index_.count(info.name)) Fail(where + " is declared twice");
      index_[info.name] = static_cast<int>(tensors_.size());
      tensors_.push_back(info);
    }
  }

  void ParseInputsAndConstants(const JObject& g, const std::map<std::string, ConstSpan>& consts) {
    JArray inputs = AsArray(Field(g, "inputs", "graph"), "graph inputs");
    for (size_t i = 0; i < inputs.size(); ++i) {
      int id = Lookup(AsString(inputs[i], "graph input"), "graph inputs");
      if (tensors_[id].kind != Kind::kInput || tensors_[id].slot >= 0) Fail("graph input " + tensors_[id].name + " is not an unused input tensor");
      tensors_[id].slot = static_cast<int>(inputs_.size());
      inputs_.push_back(id);
    }
    JArray constants = AsArray(Field(g, "constants", "graph"), "graph constants");
    for (size_t i = 0; i < constants.size(); ++i) {
      std::string name = AsString(constants[i], "graph constant");
      int id = Lookup(name, "graph constants");
      TensorInfo& t = tensors_[id];
      if (t.kind != Kind::kConst || t.slot >= 0) Fail("graph constant " + name + " is not an unused const tensor");
      auto it = consts.find(name);
      if (it == consts.end()) Fail("constant " + name + " is referenced by the graph but has no data");
      if (static_cast<int64_t>(it->second.size()) != t.numel)
        Fail("constant " + name + " has " + std::to_string(it->second.size()) + " values, its shape " +
             ShapeStr(t.shape) + " needs " + std::to_string(t.numel));
      t.slot = static_cast<int>(const_data_.size());
      const_data_.push_back(it->second);
    }
    if (consts.size() != const_data_.size()) Fail("the module holds constants the graph does not declare");
    for (const TensorInfo& t : tensors_)
      if (t.kind != Kind::kOp && t.slot < 0) Fail("tensor " + t.name + " is declared but not listed as input or constant");
  }

  void ParseNodes(const JArray& nodes) {
    produced_.assign(tensors_.size(), false);
    for (size_t i = 0; i < tensors_.size(); ++i) produced_[i] = tensors_[i].kind != Kind::kOp;
    for (size_t n = 0; n < nodes.size(); ++n) {
      std::string where = "node #" + std::to_string(n);
      JObject node = AsObject(nodes[n], where);
      std::string rule = AsString(Field(node, "op", where), where + " op");
      where = "node #" + std::to_string(n) + " (" + rule + ")";
      JArray body = AsArray(Field(node, "body", where), where + " body");
      if (body.size() == 0) Fail(where + " has an empty body");
      for (size_t k = 0; k < body.size(); ++k) {
        std::string w = where + " body[" + std::to_string(k) + "]";
        JObject op = AsObject(body[k], w);
        BodyOp parsed;
        parsed.kernel = AsString(Field(op, "kernel", w), w + " kernel");
        w += " " + parsed.kernel;
        parsed.attrs = AsObject(Field(op, "attrs", w), w + " attrs");
        if (!ForThisCpu(Attrs(parsed.attrs, w))) continue;
        JArray ins = AsArray(Field(op, "inputs", w), w + " inputs");
        for (size_t i = 0; i < ins.size(); ++i) {
          int id = Lookup(AsString(ins[i], w + " input"), w);
          if (!produced_[id]) Fail(w + " reads " + tensors_[id].name + " before it is computed");
          parsed.inputs.push_back(id);
        }
        int out = Lookup(AsString(Field(op, "output", w), w + " output"), w);
        if (produced_[out] || tensors_[out].kind != Kind::kOp) Fail(w + " writes " + tensors_[out].name + ", which is already defined");
        produced_[out] = true;
        parsed.output = out;
        parsed.where = w;
        parsed.node = static_cast<int>(n);
        parsed.rule = rule;
        ops_.push_back(std::move(parsed));
      }
    }
  }

  void ParseShapeArguments(const JArray& list) {
    for (size_t i = 0; i < list.size(); ++i) {
      std::string where = "graph shape_arguments[" + std::to_string(i) + "]";
      JArray entry = AsArray(list[i], where);
      if (entry.size() != 2) Fail(where + " is [position, [dims]]");
      int64_t position = AsInt(entry[0], where + " position");
      JArray names = AsArray(entry[1], where + " dims");
      std::vector<std::string> dims;
      for (size_t k = 0; k < names.size(); ++k) dims.push_back(AsString(names[k], where + " dim"));
      if (position < 0 || position > static_cast<int64_t>(inputs_.size() + shape_args_.size()) ||
          (!shape_args_.empty() && position <= shape_args_.back().first))
        Fail(where + " has position " + std::to_string(position) + " out of order or range");
      shape_args_.emplace_back(static_cast<int>(position), std::move(dims));
    }
  }

  void CollectDimNames(const Any& d, const std::string& where) {
    if (auto name = d.try_cast<String>()) {
      if (std::find(dim_names_.begin(), dim_names_.end(), std::string(*name)) == dim_names_.end()) {
        dim_names_.push_back(std::string(*name));
        std::sort(dim_names_.begin(), dim_names_.end());
      }
      return;
    }
    JArray e = AsArray(d, where + " shape");
    if (e.size() != 3) Fail(where + ": a dim expression is [op, a, b]");
    for (size_t k = 1; k < 3; ++k)
      if (!e[k].try_cast<int64_t>().has_value()) CollectDimNames(e[k], where);
  }

  // Every symbolic dim must be one dim of an input as it stands, so that a call's shapes size it.
  void CheckDimsBound() const {
    std::set<std::string> bound;
    for (const auto& arg : shape_args_) bound.insert(arg.second.begin(), arg.second.end());
    for (int id : inputs_)
      for (size_t k = 0; k < tensors_[id].dims.size(); ++k)
        if (auto name = tensors_[id].dims[k].try_cast<String>()) bound.insert(std::string(*name));
    for (const std::string& name : dim_names_)
      if (!bound.count(name)) Fail("symbolic dim " + name + " is not a dim of any graph input, so no call can size it");
  }

  // Whether an op runs on this CPU: unless it names a feature in "only_if_cpu" that the CPU lacks.
  bool ForThisCpu(const Attrs& a) const {
    if (!a.Has("only_if_cpu")) return true;
    if (version_ < 2) Fail("only_if_cpu appears in a graph of schema version 1");
    return cpu_features_.count(a.Str("only_if_cpu")) > 0;
  }

  std::set<std::string> cpu_features_;
  const DimEnv* env_;
  bool symbolic_ = false;
  std::vector<std::pair<int, std::vector<std::string>>> shape_args_;
  std::vector<std::string> dim_names_;
  JObject options_;
  int64_t version_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, int> index_;
  std::vector<int> inputs_, outputs_, uses_;
  std::vector<bool> produced_;
  std::vector<ConstSpan> const_data_;
  std::vector<BodyOp> ops_;
};

}  // namespace graph_runtime
}  // namespace byoc

#endif  // BYOC_GRAPH_RUNTIME_GRAPH_H_
