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
 * An executor that needs what the module was created with (a thread count, a cache its specializations
 * share) declares `struct Settings`, `static Settings NewSettings()` (read once, on the thread that creates
 * the module) and the constructor `Executor(const ParsedGraph&, const Settings&)`.
 *
 * A graph with symbolic dims (schema 4) is compiled per shape: each call binds the dims from its input
 * tensors, and the executor compiled for those sizes is taken from a cache of at most "shape_cache"
 * (a graph option, default kDefaultShapeCache) specializations, least recently used first out.
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
#include <tvm/ffi/container/shape.h>
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
#include <list>
#include <map>
#include <mutex>
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
constexpr int64_t kGraphVersion = 4;   // newest "version" of the graph JSON; an Executor reads from its kMinGraphVersion
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

// -- symbolic dims (schema 4) ---------------------------------------------------------------------
// A dim of a tensor's "shape" is an int, the name of a symbolic dim ("batch"), or [op, a, b] with op one of
// + - * // % min max (codegens/json_runtime/serializer.py writes them from TIR's shape arithmetic).
using DimEnv = std::map<std::string, int64_t>;
constexpr size_t kDefaultShapeCache = 8;

inline int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

// The size of dim `d` where the symbolic dims have the sizes `env`.
inline int64_t EvalDim(const Any& d, const DimEnv& env, const std::string& where) {
  if (auto i = d.try_cast<int64_t>()) return *i;
  if (auto name = d.try_cast<String>()) {
    auto it = env.find(std::string(*name));
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
              const std::map<std::string, const std::vector<float>*>& consts,
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
  const std::vector<float>& const_data(int id) const { return *const_data_[tensors_[id].slot]; }
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
    DimEnv env = std::move(given);
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const TensorInfo& t = tensors_[inputs_[i]];
      std::vector<int64_t> got(shapes[i], shapes[i] + ranks[i]);
      if (static_cast<size_t>(ranks[i]) != t.dims.size())
        TVM_FFI_THROW(ValueError) << symbol << ": argument " << i << " has rank " << ranks[i] << ", expected "
                                  << t.dims.size();
      for (size_t d = 0; d < t.dims.size(); ++d) {
        auto name = t.dims[d].try_cast<String>();
        if (!name.has_value()) continue;
        auto [it, fresh] = env.emplace(std::string(*name), got[d]);
        if (!fresh && it->second != got[d])
          TVM_FFI_THROW(ValueError) << symbol << ": argument " << i << " has " << std::string(*name) << " = " << got[d]
                                    << " (shape " << ShapeStr(got) << "), another input has " << it->second;
      }
    }
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const TensorInfo& t = tensors_[inputs_[i]];
      for (size_t d = 0; d < t.dims.size(); ++d) {
        int64_t want = EvalDim(t.dims[d], env, symbol + ": argument " + std::to_string(i));
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
      // Constants travel as float32 (an int8 weight's values are exact in it); an executor
      // that has no 8-bit kernels refuses the other dtypes.
      if (info.dtype != "float32" && !((info.dtype == "uint8" || info.dtype == "int8") && info.kind != Kind::kConst))
        Fail(where + " has dtype " + info.dtype + " (float32, and uint8/int8 for non-constants, only)");
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

// Whether an executor says what runs each of its steps (a module's get_implementations).
template <class E, class = void>
struct ReportsImplementations : std::false_type {};
template <class E>
struct ReportsImplementations<E, std::void_t<decltype(std::declval<const E&>().Implementations())>>
    : std::true_type {};

// Whether an executor times its steps (a module's get_step_times).
template <class E, class = void>
struct ReportsStepTimes : std::false_type {};
template <class E>
struct ReportsStepTimes<E, std::void_t<decltype(std::declval<const E&>().StepTimes())>> : std::true_type {};

// Whether an executor takes the settings of the module that creates it (see the top of this file).
template <class E, class = void>
struct HasSettings : std::false_type {
  using type = int;  // unused
};
template <class E>
struct HasSettings<E, std::void_t<typename E::Settings>> : std::true_type {
  using type = typename E::Settings;
};

// A graph compiled for one set of sizes of its symbolic dims (or for its static shapes).
template <class Executor>
struct Specialization {
  std::unique_ptr<const ParsedGraph> graph;
  std::unique_ptr<const Executor> executor;
};

template <class Executor>
class GraphModuleObj : public ModuleObj {
 public:
  static std::string Kind() { return std::string("byoc_") + Executor::kName; }

  GraphModuleObj(std::string symbol, std::string graph_json, Constants consts)
      : symbol_(std::move(symbol)), graph_json_(std::move(graph_json)), consts_(std::move(consts)),
        kind_(Kind()) {
    for (const auto& c : consts_) {
      if (!by_name_.emplace(c.first, &c.second).second) Fail("constant " + c.first + " is given twice");
    }
    if constexpr (HasSettings<Executor>::value) settings_ = Executor::NewSettings();
    graph_ = std::make_unique<ParsedGraph>(symbol_, graph_json_, by_name_, Executor::CpuFeatures(),
                                           Executor::kMinGraphVersion);
    if (!graph_->symbolic()) {
      executor_ = NewExecutor(*graph_);
    } else {
      int64_t bound = graph_->IntOption("shape_cache", kDefaultShapeCache);
      if (bound < 1) Fail("graph option shape_cache must be at least 1");
      cache_bound_ = static_cast<size_t>(bound);
    }
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
    if (name == "get_specializations") {  // [shapes compiled and alive now, shapes compiled in all]
      return Function::FromPacked([self, this](PackedArgs, Any* rv) {
        std::lock_guard<std::mutex> lock(cache_mutex_);
        *rv = Array<int64_t>{static_cast<int64_t>(executor_ ? 1 : cache_.size()), executor_ ? 1 : created_};
      });
    }
    if (name == "get_memory") {  // [workspace bytes per call, bytes of the constants as given, bytes it made]
      return Function::FromPacked([self, this](PackedArgs, Any* rv) {
        MemoryUse use = Memory();
        int64_t given = 0;
        for (const auto& c : consts_) given += static_cast<int64_t>(c.second.size() * sizeof(float));
        *rv = Array<int64_t>{static_cast<int64_t>(use.workspace_bytes), given, static_cast<int64_t>(use.constant_bytes)};
      });
    }
    if constexpr (ReportsThreads<Executor>::value) {
      if (name == "get_max_threads") {  // the team size its kernels were created for
        return Function::FromPacked(
            [self, this](PackedArgs, Any* rv) { *rv = static_cast<int64_t>(MaxThreads()); });
      }
    }
    if constexpr (ReportsImplementations<Executor>::value) {
      if (name == "get_implementations") {  // of the static graph, or of the shape called last; [] before any call
        return Function::FromPacked([self, this](PackedArgs, Any* rv) {
          Array<String> names;
          WithLastExecutor([&](const Executor& e) {
            for (const std::string& n : e.Implementations()) names.push_back(String(n));
          });
          *rv = names;
        });
      }
    }
    if constexpr (ReportsStepTimes<Executor>::value) {
      if (name == "get_step_times") {  // per step of get_implementations: [calls, nanoseconds] while timed
        return Function::FromPacked([self, this](PackedArgs, Any* rv) {
          Array<Array<int64_t>> times;
          WithLastExecutor([&](const Executor& e) {
            for (const auto& t : e.StepTimes()) times.push_back(Array<int64_t>{t.first, t.second});
          });
          *rv = times;
        });
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

  std::unique_ptr<const Executor> NewExecutor(const ParsedGraph& graph) const {
    if constexpr (HasSettings<Executor>::value) {
      return std::make_unique<Executor>(graph, settings_);
    } else {
      return std::make_unique<Executor>(graph);
    }
  }

  // The specialization for the sizes `env`: from the cache (moved to its front), or compiled now and
  // added, the least recently used one leaving when the cache is full. Compiling happens outside the
  // lock; a call already running on an evicted one keeps it alive through its shared_ptr.
  std::shared_ptr<const Specialization<Executor>> Specialize(const DimEnv& env) const {
    std::vector<int64_t> key;
    for (const std::string& name : graph_->dim_names()) key.push_back(env.at(name));
    {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      for (auto it = cache_.begin(); it != cache_.end(); ++it) {
        if (it->first == key) {
          if (it != cache_.begin()) cache_.splice(cache_.begin(), cache_, it);
          return cache_.front().second;
        }
      }
    }
    auto made = std::make_shared<Specialization<Executor>>();
    made->graph = std::make_unique<ParsedGraph>(symbol_, graph_json_, by_name_, Executor::CpuFeatures(),
                                                Executor::kMinGraphVersion, &env);
    made->executor = NewExecutor(*made->graph);
    std::lock_guard<std::mutex> lock(cache_mutex_);
    for (const auto& entry : cache_)
      if (entry.first == key) return entry.second;  // another thread made it meanwhile
    cache_.emplace_front(std::move(key), made);
    ++created_;
    while (cache_.size() > cache_bound_) cache_.pop_back();
    return made;
  }

  // f(executor) for the executor of a static graph, or of the shape called last (kept alive while f runs, should
  // another thread's call evict it); nothing before a symbolic graph's first call.
  template <class F>
  void WithLastExecutor(F f) const {
    if (executor_) return f(*executor_);
    std::shared_ptr<const Specialization<Executor>> last;
    {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      if (cache_.empty()) return;
      last = cache_.front().second;
    }
    f(*last->executor);
  }

  MemoryUse Memory() const {
    if (executor_) return executor_->Memory();
    MemoryUse use;
    std::lock_guard<std::mutex> lock(cache_mutex_);
    for (const auto& entry : cache_) {
      MemoryUse one = entry.second->executor->Memory();
      use.workspace_bytes = std::max(use.workspace_bytes, one.workspace_bytes);
      use.constant_bytes += one.constant_bytes;
    }
    return use;
  }

  int MaxThreads() const {
    if constexpr (ReportsThreads<Executor>::value) {
      if (executor_) return executor_->MaxThreads();
      if constexpr (HasSettings<Executor>::value) return Executor::MaxThreadsOf(settings_);
    }
    return 1;
  }

  // Destination-passing style: outputs are the caller's buffers, written in place. A graph with symbolic
  // dims may also take shapes among its inputs (shape_arguments), which size dims no input has whole.
  void Call(const PackedArgs& args) const {
    size_t ni = graph_->inputs().size(), no = graph_->outputs().size(), ns = graph_->shape_arguments().size();
    if (static_cast<size_t>(args.size()) != ni + ns + no) {
      if (ns == 0)
        TVM_FFI_THROW(TypeError) << symbol_ << ": expected " << ni << " input and " << no << " output tensors, got "
                                 << args.size() << " arguments";
      TVM_FFI_THROW(TypeError) << symbol_ << ": expected " << ni << " input, " << ns << " shape and " << no
                               << " output arguments, got " << args.size() << " arguments";
    }
    std::shared_ptr<const Specialization<Executor>> special;
    const ParsedGraph* graph = graph_.get();
    const Executor* executor = executor_.get();
    constexpr size_t kMaxInputs = 64;
    int position[kMaxInputs];  // the argument each tensor input is
    if (ni > kMaxInputs) TVM_FFI_THROW(ValueError) << symbol_ << ": more than " << kMaxInputs << " inputs";
    DimEnv given;
    for (size_t a = 0, i = 0, k = 0; a < ni + ns; ++a) {
      if (k < ns && graph_->shape_arguments()[k].first == static_cast<int>(a)) {
        auto shape = args[a].try_cast<tvm::ffi::Shape>();
        const std::vector<std::string>& names = graph_->shape_arguments()[k++].second;
        if (!shape.has_value() || shape->size() != names.size())
          TVM_FFI_THROW(TypeError) << symbol_ << ": argument " << a << " is not a shape of " << names.size() << " dims";
        for (size_t d = 0; d < names.size(); ++d) given[names[d]] = (*shape)[d];
      } else {
        position[i++] = static_cast<int>(a);
      }
    }
    if (!executor) {  // symbolic dims: size them from the inputs, then take that shape's executor
      const int64_t* shapes[kMaxInputs];
      int ranks[kMaxInputs];
      for (size_t i = 0; i < ni; ++i) {
        auto dl = args[position[i]].try_cast<DLTensor*>();
        if (!dl.has_value()) TVM_FFI_THROW(TypeError) << symbol_ << ": argument " << position[i] << " is not a tensor";
        shapes[i] = (*dl)->shape;
        ranks[i] = (*dl)->ndim;
      }
      special = Specialize(graph_->Bind(symbol_, shapes, ranks, std::move(given)));
      graph = special->graph.get();
      executor = special->executor.get();
    }
    // Small partitions are the common case: keep their pointers on the stack.
    constexpr size_t kOnStack = 16;
    float* stack[kOnStack];
    std::vector<float*> heap(ni + no > kOnStack ? ni + no : 0);
    float** ptrs = ni + no > kOnStack ? heap.data() : stack;
    for (size_t i = 0; i < ni; ++i) ptrs[i] = Arg(args, position[i], graph->tensor(graph->inputs()[i]));
    for (size_t i = 0; i < no; ++i)
      ptrs[ni + i] = Arg(args, static_cast<int>(ni + ns + i), graph->tensor(graph->outputs()[i]));
    executor->Run(ptrs, ptrs + ni);
  }

  const std::string symbol_;
  const std::string graph_json_;
  const Constants consts_;  // as given; what SaveToBytes writes
  const std::string kind_;
  std::map<std::string, const std::vector<float>*> by_name_;  // into consts_
  typename HasSettings<Executor>::type settings_{};
  std::unique_ptr<const ParsedGraph> graph_;     // the graph as written (a template when symbolic)
  std::unique_ptr<const Executor> executor_;     // for a static graph; null when symbolic
  // Symbolic graphs: the specializations, most recently used first, keyed by the sizes of dim_names().
  size_t cache_bound_ = kDefaultShapeCache;
  mutable std::mutex cache_mutex_;
  mutable std::list<std::pair<std::vector<int64_t>, std::shared_ptr<const Specialization<Executor>>>> cache_;
  mutable int64_t created_ = 0;
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
