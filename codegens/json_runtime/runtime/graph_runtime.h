/*
 * graph_runtime.h -- what byoc's graph runtimes share: the module blob, JSON
 * access with located errors, the parsed and validated partition graph, and
 * the tvm-ffi module that holds one partition and calls an executor.
 *
 * A runtime (json_runtime.cc: reference kernels; codegens/dnnl/runtime/: oneDNN)
 * defines an Executor class
 *
 *     struct Executor {
 *       static constexpr const char* kName;     // "json_runtime": error prefix, global names
 *       static constexpr char kMagic[8];        // first bytes of its module blob
 *       static constexpr int64_t kMinGraphVersion;  // the oldest graph schema it reads (to kGraphVersion)
 *       static std::set<std::string> CpuFeatures();  // what ops marked "only_if_cpu" may ask for
 *       explicit Executor(const ParsedGraph&);  // compile once; may keep pointers into the graph
 *       void Run(float* const* in, float* const* out) const;  // thread safe
 *     };
 *
 * and registers it with RegisterGraphRuntime<Executor>() in its
 * TVM_FFI_STATIC_INIT_BLOCK, which defines the globals
 *
 *     byoc.<name>.create(symbol, graph_json, const_names, consts) -> Module
 *     byoc.<name>.format_version() -> int
 *     byoc.<name>.save_to_bytes(module) -> bytes    (what export embeds)
 *     ffi.Module.load_from_bytes.byoc_<name>(bytes) -> Module
 *
 * The graph JSON schema is documented in byoc/codegens/json_runtime/serializer.py.
 * Every error is a ValueError / TypeError whose message starts "byoc <name>:".
 */
#ifndef BYOC_GRAPH_RUNTIME_H_
#define BYOC_GRAPH_RUNTIME_H_

#include <tvm/ffi/cast.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/json.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace byoc {
namespace graph_runtime {

using tvm::ffi::Any;
using tvm::ffi::Array;
using tvm::ffi::Bytes;
using tvm::ffi::Function;
using tvm::ffi::Map;
using tvm::ffi::Module;
using tvm::ffi::ModuleObj;
using tvm::ffi::Object;
using tvm::ffi::ObjectPtr;
using tvm::ffi::Optional;
using tvm::ffi::PackedArgs;
using tvm::ffi::String;

constexpr uint32_t kBlobVersion = 1;   // layout of SaveToBytes
constexpr int64_t kGraphVersion = 3;   // newest "version" of the graph JSON; an Executor reads from its kMinGraphVersion
constexpr int kMaxJsonDepth = 64;      // the schema nests 5 deep; refuse pathological input
// The rank limit of the kernels and the vendors' rules: written once, in c_source/byoc_kernels.h, and handed
// to the compiler by setup.py (codegens/limits.py reads it for Python).
#ifndef BYOC_MAX_RANK
#error "BYOC_MAX_RANK is defined by setup.py from c_source/byoc_kernels.h (codegens/limits.py)"
#endif
constexpr size_t kMaxRank = BYOC_MAX_RANK;

// The runtime whose errors are being raised ("json_runtime", "dnnl"); set by
// each shared library, which holds exactly one runtime.
extern const char* const kRuntimeName;

[[noreturn]] inline void Fail(const std::string& what) {
  TVM_FFI_THROW(ValueError) << "byoc " << kRuntimeName << ": " << what;
  TVM_FFI_UNREACHABLE();
}

// ---------------------------------------------------------------------------
// Blob: <magic 8> <u32 blob version> <u32 reserved 0>
//       <u64 n><symbol n bytes> <u64 n><graph json n bytes>
//       <u64 count> count x (<u64 n><name n bytes> <u64 elements><float32 LE x elements>)
//       <u64 FNV-1a 64 of every byte before it>
// All integers and floats little-endian, whatever the host.
// ---------------------------------------------------------------------------
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

// ---------------------------------------------------------------------------
// JSON access with errors that say where the graph is wrong.
// ---------------------------------------------------------------------------
using JObject = Map<Any, Any>;
using JArray = Array<Any>;

inline void CheckJsonDepth(const std::string& text) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth) Fail("graph JSON nests deeper than the schema allows");
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
}

inline JObject AsObject(const Any& v, const std::string& where) {
  auto o = v.try_cast<JObject>();
  if (!o.has_value()) Fail(where + " must be a JSON object");
  return *o;
}

inline JArray AsArray(const Any& v, const std::string& where) {
  auto a = v.try_cast<JArray>();
  if (!a.has_value()) Fail(where + " must be a JSON array");
  return *a;
}

inline Any Field(const JObject& o, const char* key, const std::string& where) {
  auto it = o.find(Any(String(key)));
  if (it == o.end()) Fail(where + " has no field \"" + key + "\"");
  return (*it).second;
}

inline std::string AsString(const Any& v, const std::string& where) {
  auto s = v.as<String>();
  if (!s.has_value()) Fail(where + " must be a string");
  return std::string(*s);
}

inline int64_t AsInt(const Any& v, const std::string& where) {
  if (v.as<bool>().has_value()) Fail(where + " must be an integer, not a boolean");
  auto i = v.as<int64_t>();
  if (!i.has_value()) Fail(where + " must be an integer");
  return *i;
}

inline double AsFloat(const Any& v, const std::string& where) {
  if (auto d = v.as<double>()) return *d;
  if (auto i = v.as<int64_t>()) return static_cast<double>(*i);
  if (auto s = v.as<String>()) {
    // Non-finite floats are spelled as strings to keep the JSON strict.
    std::string t(*s);
    if (t == "inf") return INFINITY;
    if (t == "-inf") return -INFINITY;
    if (t == "nan") return NAN;
  }
  Fail(where + " must be a number (or \"inf\", \"-inf\", \"nan\")");
}

inline std::vector<int64_t> AsInts(const Any& v, const std::string& where) {
  std::vector<int64_t> out;
  JArray a = AsArray(v, where);
  for (size_t i = 0; i < a.size(); ++i) out.push_back(AsInt(a[i], where + "[" + std::to_string(i) + "]"));
  return out;
}

// A typed attribute: {"type": "int[]", "value": [1, 1]}.
class Attrs {
 public:
  Attrs(JObject attrs, std::string where) : attrs_(std::move(attrs)), where_(std::move(where)) {}

  bool Has(const char* key) const { return attrs_.find(Any(String(key))) != attrs_.end(); }
  bool IsNone(const char* key) const { return Type(key) == "none"; }
  bool IsInts(const char* key) const { return Type(key) == "int[]"; }
  int64_t Int(const char* key) const { return AsInt(Value(key, "int"), Where(key)); }
  bool Bool(const char* key) const {
    auto b = Value(key, "bool").as<bool>();
    if (!b.has_value()) Fail(Where(key) + " must be true or false");
    return *b;
  }
  // An integer is a float too: TVM keeps integral bounds (clip's min/max) as IntImm.
  double Float(const char* key) const {
    return AsFloat(Value(key, Type(key) == "int" ? "int" : "float"), Where(key));
  }
  std::string Str(const char* key) const { return AsString(Value(key, "str"), Where(key)); }
  std::vector<int64_t> Ints(const char* key) const { return AsInts(Value(key, "int[]"), Where(key)); }
  std::vector<double> Floats(const char* key) const {
    JArray items = AsArray(Value(key, "float[]"), Where(key));
    std::vector<double> out;
    for (size_t i = 0; i < items.size(); ++i) out.push_back(AsFloat(items[i], Where(key)));
    return out;
  }

 private:
  std::string Where(const char* key) const { return where_ + " attribute \"" + key + "\""; }
  std::string Type(const char* key) const {
    JObject a = AsObject(Field(attrs_, key, where_ + " attrs"), Where(key));
    return AsString(Field(a, "type", Where(key)), Where(key) + " type");
  }
  Any Value(const char* key, const char* type) const {
    JObject a = AsObject(Field(attrs_, key, where_ + " attrs"), Where(key));
    std::string t = AsString(Field(a, "type", Where(key)), Where(key) + " type");
    if (t != type) Fail(Where(key) + " has type " + t + ", expected " + type);
    return Field(a, "value", Where(key));
  }

  JObject attrs_;
  std::string where_;
};

// ---------------------------------------------------------------------------
// The compiled graph.
// ---------------------------------------------------------------------------
enum class Kind { kInput, kConst, kOp };

struct TensorInfo {
  std::string name;
  Kind kind;
  std::string dtype;  // float32; uint8 or int8 where an executor takes quantized tensors
  std::vector<int64_t> shape;
  int64_t numel = 1;
  int slot = -1;  // input index, constant index, or -1
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
  ParsedGraph(const std::string& symbol, const std::string& text,
              const std::map<std::string, const std::vector<float>*>& consts,
              const std::set<std::string>& cpu_features = {}, int64_t min_version = 1)
      : cpu_features_(cpu_features) {
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
    ParseInputsAndConstants(g, consts);
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
  const std::vector<float>& const_data(int id) const { return *const_data_[tensors_[id].slot]; }
  // The vendor options the graph was built with ({} in graphs that carry none).
  Attrs options() const { return Attrs(options_, "graph options"); }
  // Boolean option `key`, or `otherwise` when the graph does not set it.
  bool BoolOption(const char* key, bool otherwise) const {
    Attrs a = options();
    return a.Has(key) ? a.Bool(key) : otherwise;
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
      // Constants travel as float32 (an int8 weight's values are exact in it); an executor
      // that has no 8-bit kernels refuses the other dtypes.
      if (info.dtype != "float32" && !((info.dtype == "uint8" || info.dtype == "int8") && info.kind != Kind::kConst))
        Fail(where + " has dtype " + info.dtype + " (float32, and uint8/int8 for non-constants, only)");
      info.shape = AsInts(Field(t, "shape", where), where + " shape");
      if (info.shape.size() > kMaxRank) Fail(where + " has rank above " + std::to_string(kMaxRank));
      for (int64_t d : info.shape) {
        if (d < 0 || (d > 0 && info.numel > (int64_t{1} << 40) / d)) Fail(where + " has an invalid shape");
        info.numel *= d;
      }
      if (index_.count(info.name)) Fail(where + " is declared twice");
      index_[info.name] = static_cast<int>(tensors_.size());
      tensors_.push_back(info);
    }
  }

  void ParseInputsAndConstants(const JObject& g, const std::map<std::string, const std::vector<float>*>& consts) {
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
      if (static_cast<int64_t>(it->second->size()) != t.numel)
        Fail("constant " + name + " has " + std::to_string(it->second->size()) + " values, its shape " +
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

  // Whether an op runs on this CPU: unless it names a feature in "only_if_cpu" that the CPU lacks.
  bool ForThisCpu(const Attrs& a) const {
    if (!a.Has("only_if_cpu")) return true;
    if (version_ < 2) Fail("only_if_cpu appears in a graph of schema version 1");
    return cpu_features_.count(a.Str("only_if_cpu")) > 0;
  }

  std::set<std::string> cpu_features_;
  JObject options_;
  int64_t version_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, int> index_;
  std::vector<int> inputs_, outputs_, uses_;
  std::vector<bool> produced_;
  std::vector<const std::vector<float>*> const_data_;
  std::vector<BodyOp> ops_;
};

// ---------------------------------------------------------------------------
// The module: one partition, its graph, its constants, and an Executor.
// ---------------------------------------------------------------------------
using Constants = std::vector<std::pair<std::string, std::vector<float>>>;

// What an executor holds besides the module's constants as given: the bytes one call works in
// (per call in flight), and the constants it made itself (e.g. weights reordered for a kernel).
struct MemoryUse {
  size_t workspace_bytes = 0;
  size_t constant_bytes = 0;
};

// Whether an executor reports the team size it was created for (int MaxThreads() const).
template <class E, class = void>
struct ReportsThreads : std::false_type {};
template <class E>
struct ReportsThreads<E, std::void_t<decltype(std::declval<const E&>().MaxThreads())>> : std::true_type {};

template <class Executor>
class GraphModuleObj : public ModuleObj {
 public:
  static std::string Kind() { return std::string("byoc_") + Executor::kName; }

  GraphModuleObj(std::string symbol, std::string graph_json, Constants consts)
      : symbol_(std::move(symbol)), graph_json_(std::move(graph_json)), consts_(std::move(consts)),
        kind_(Kind()) {
    std::map<std::string, const std::vector<float>*> by_name;
    for (const auto& c : consts_) {
      if (!by_name.emplace(c.first, &c.second).second) Fail("constant " + c.first + " is given twice");
    }
    graph_ = std::make_unique<ParsedGraph>(symbol_, graph_json_, by_name, Executor::CpuFeatures(),
                                           Executor::kMinGraphVersion);
    executor_ = std::make_unique<Executor>(*graph_);
  }

  const char* kind() const final { return kind_.c_str(); }

  int GetPropertyMask() const final { return Module::kBinarySerializable | Module::kRunnable; }

  Optional<Function> GetFunction(const String& name) final {
    ObjectPtr<Object> self = tvm::ffi::GetObjectPtr<Object>(this);
    if (name == symbol_) {
      return Function::FromPacked([self, this](PackedArgs args, Any*) { Call(args); });
    }
    if (name == "get_graph_json") {
      return Function::FromPacked([self, this](PackedArgs, Any* rv) { *rv = String(graph_json_); });
    }
    if (name == "get_symbol") {
      return Function::FromPacked([self, this](PackedArgs, Any* rv) { *rv = String(symbol_); });
    }
    if (name == "get_memory") {  // [workspace bytes per call, bytes of the constants as given, bytes it made]
      return Function::FromPacked([self, this](PackedArgs, Any* rv) {
        MemoryUse use = executor_->Memory();
        int64_t given = 0;
        for (const auto& c : consts_) given += static_cast<int64_t>(c.second.size() * sizeof(float));
        *rv = Array<int64_t>{static_cast<int64_t>(use.workspace_bytes), given, static_cast<int64_t>(use.constant_bytes)};
      });
    }
    if constexpr (ReportsThreads<Executor>::value) {
      if (name == "get_max_threads") {  // the team size its kernels were created for
        return Function::FromPacked(
            [self, this](PackedArgs, Any* rv) { *rv = static_cast<int64_t>(executor_->MaxThreads()); });
      }
    }
    return std::nullopt;
  }

  Bytes SaveToBytes() const final {
    Writer w;
    w.Raw(Executor::kMagic, sizeof(Executor::kMagic));
    w.U32(kBlobVersion);
    w.U32(0);
    w.Str(symbol_);
    w.Str(graph_json_);
    w.U64(consts_.size());
    for (const auto& c : consts_) {
      w.Str(c.first);
      w.Floats(c.second);
    }
    return Bytes(w.Finish());
  }

  static Module LoadFromBytes(const Bytes& bytes) {
    const char* data = bytes.data();
    size_t size = bytes.size();
    constexpr size_t kMagicSize = sizeof(Executor::kMagic);
    if (size < kMagicSize + 16 || std::memcmp(data, Executor::kMagic, kMagicSize) != 0)
      Fail(std::string("not a ") + Executor::kName + " module blob (bad magic or too short: " +
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
    std::string symbol = r.Str("symbol");
    std::string graph = r.Str("graph JSON");
    uint64_t count = r.Uint(8, "constant count");
    if (count > r.Remaining() / 16) Fail("corrupted module blob: constant count " + std::to_string(count) + " is impossible");
    Constants consts;
    for (uint64_t i = 0; i < count; ++i) {
      std::string name = r.Str("constant name");
      consts.emplace_back(std::move(name), r.Floats("constant data"));
    }
    if (r.Remaining() != 0) Fail("corrupted module blob: " + std::to_string(r.Remaining()) + " unexpected trailing bytes");
    return Module(tvm::ffi::make_object<GraphModuleObj>(std::move(symbol), std::move(graph), std::move(consts)));
  }

  static Module Create(const String& symbol, const String& graph_json, const Array<String>& names,
                       const Array<tvm::ffi::Tensor>& values) {
    if (names.size() != values.size()) Fail("create: got " + std::to_string(names.size()) + " constant names and " +
                                            std::to_string(values.size()) + " constant tensors");
    Constants consts;
    for (size_t i = 0; i < names.size(); ++i) {
      const DLTensor* t = values[i].GetDLTensorPtr();
      std::string name(names[i]);
      if (t->device.device_type != kDLCPU || t->dtype.code != kDLFloat || t->dtype.bits != 32 || t->dtype.lanes != 1 ||
          !tvm::ffi::IsContiguous(*t))
        Fail("create: constant " + name + " must be a contiguous float32 CPU tensor");
      int64_t n = 1;
      for (int d = 0; d < t->ndim; ++d) n *= t->shape[d];
      const float* p = reinterpret_cast<const float*>(static_cast<const char*>(t->data) + t->byte_offset);
      consts.emplace_back(std::move(name), std::vector<float>(p, p + n));
    }
    return Module(tvm::ffi::make_object<GraphModuleObj>(std::string(symbol), std::string(graph_json),
                                                        std::move(consts)));
  }

 private:
  // Checked on every call, so nothing here allocates unless it fails.
  float* Arg(const PackedArgs& args, int i, const TensorInfo& t) const {
    auto where = [&]() { return symbol_ + ": argument " + std::to_string(i); };
    auto dl = args[i].try_cast<DLTensor*>();
    if (!dl.has_value()) TVM_FFI_THROW(TypeError) << where() << " is not a tensor";
    const DLTensor* x = *dl;
    if (x->device.device_type != kDLCPU) TVM_FFI_THROW(ValueError) << where() << " is not on the CPU";
    bool float32 = t.dtype == "float32";
    uint8_t code = float32 ? kDLFloat : t.dtype == "uint8" ? kDLUInt : kDLInt;
    if (x->dtype.code != code || x->dtype.bits != (float32 ? 32 : 8) || x->dtype.lanes != 1)
      TVM_FFI_THROW(TypeError) << where() << " is not " << t.dtype;
    if (static_cast<size_t>(x->ndim) != t.shape.size() || !std::equal(t.shape.begin(), t.shape.end(), x->shape)) {
      std::vector<int64_t> shape(x->shape, x->shape + x->ndim);
      TVM_FFI_THROW(ValueError) << where() << " has shape " << ShapeStr(shape) << ", expected " << ShapeStr(t.shape);
    }
    if (!tvm::ffi::IsContiguous(*x)) TVM_FFI_THROW(ValueError) << where() << " is not contiguous";
    return reinterpret_cast<float*>(static_cast<char*>(x->data) + x->byte_offset);
  }

  // Destination-passing style: outputs are the caller's buffers, written in place.
  void Call(const PackedArgs& args) const {
    size_t ni = graph_->inputs().size(), no = graph_->outputs().size();
    if (static_cast<size_t>(args.size()) != ni + no)
      TVM_FFI_THROW(TypeError) << symbol_ << ": expected " << ni << " input and " << no << " output tensors, got "
                               << args.size() << " arguments";
    // Small partitions are the common case: keep their pointers on the stack.
    constexpr size_t kOnStack = 16;
    float* stack[kOnStack];
    std::vector<float*> heap(ni + no > kOnStack ? ni + no : 0);
    float** ptrs = ni + no > kOnStack ? heap.data() : stack;
    for (size_t i = 0; i < ni; ++i) ptrs[i] = Arg(args, static_cast<int>(i), graph_->tensor(graph_->inputs()[i]));
    for (size_t i = 0; i < no; ++i)
      ptrs[ni + i] = Arg(args, static_cast<int>(ni + i), graph_->tensor(graph_->outputs()[i]));
    executor_->Run(ptrs, ptrs + ni);
  }

  const std::string symbol_;
  const std::string graph_json_;
  const Constants consts_;  // as given; what SaveToBytes writes
  const std::string kind_;
  std::unique_ptr<const ParsedGraph> graph_;
  std::unique_ptr<const Executor> executor_;
};

// Defines byoc.<name>.create / format_version / save_to_bytes and the loader.
template <class Executor>
void RegisterGraphRuntime() {
  using M = GraphModuleObj<Executor>;
  namespace refl = tvm::ffi::reflection;
  const std::string prefix = std::string("byoc.") + Executor::kName + ".";
  const std::string kind = M::Kind();
  refl::GlobalDef()
      .def((prefix + "create").c_str(), M::Create)
      .def((prefix + "format_version").c_str(), []() -> int64_t { return kBlobVersion * 1000 + kGraphVersion; })
      .def((prefix + "save_to_bytes").c_str(),
           [kind](const Module& mod) -> Bytes {
             if (std::string(mod->kind()) != kind) Fail("save_to_bytes: not a " + kind + " module");
             return mod->SaveToBytes();
           })
      .def(("ffi.Module.load_from_bytes." + kind).c_str(), M::LoadFromBytes);
}

}  // namespace graph_runtime
}  // namespace byoc

#endif  // BYOC_GRAPH_RUNTIME_H_
