/*
 * json_runtime.cc -- byoc's JSON-graph runtime module (tvm-ffi ModuleObj).
 *
 * A module holds one partition: its symbol, its graph as JSON (schema in
 * byoc/codegens/json_runtime/serializer.py) and its float32 constants. Calling
 * the function named <symbol> with (inputs..., outputs...) runs the graph with
 * the reference kernels of byoc_kernels.h, shared with the C-source codegen.
 *
 * Design points
 *  - Immutable after construction: the graph is validated and compiled once
 *    into a list of steps; every call allocates its own intermediates, so one
 *    module can run on many threads at once.
 *  - Constants are stored once, in the module, in the host's byte order.
 *  - SaveToBytes writes a fixed little-endian layout (see Blob below) that
 *    loads on hosts of either byte order; every length is checked against the
 *    remaining bytes and a checksum covers the whole blob, so a corrupted blob
 *    is a ValueError at load, never a crash.
 *
 * Registered globals
 *  - byoc.json_runtime.create(symbol, graph_json, const_names, consts) -> Module
 *  - byoc.json_runtime.format_version() -> int
 *  - byoc.json_runtime.save_to_bytes(module) -> bytes   (what export embeds)
 *  - ffi.Module.load_from_bytes.byoc_json_runtime(bytes) -> Module
 */
#include <tvm/ffi/cast.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/json.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "byoc_kernels.h"

namespace byoc {
namespace json_runtime {

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

constexpr const char* kKind = "byoc_json_runtime";  // also spelled out in the loader name below
constexpr char kMagic[8] = {'B', 'Y', 'O', 'C', 'J', 'S', 'R', 'T'};
constexpr uint32_t kBlobVersion = 1;   // layout of SaveToBytes
constexpr int64_t kGraphVersion = 1;   // "version" field of the graph JSON
constexpr int kMaxJsonDepth = 64;      // the schema nests 5 deep; refuse pathological input

[[noreturn]] void Fail(const std::string& what) {
  TVM_FFI_THROW(ValueError) << "byoc json_runtime: " << what;
  TVM_FFI_UNREACHABLE();
}

// ---------------------------------------------------------------------------
// Blob: <magic 8> <u32 blob version> <u32 reserved 0>
//       <u64 n><symbol n bytes> <u64 n><graph json n bytes>
//       <u64 count> count x (<u64 n><name n bytes> <u64 elements><float32 LE x elements>)
//       <u64 FNV-1a 64 of every byte before it>
// All integers and floats little-endian, whatever the host.
// ---------------------------------------------------------------------------
uint64_t Fnv1a(const char* data, size_t n) {
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

void CheckJsonDepth(const std::string& text) {
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

JObject AsObject(const Any& v, const std::string& where) {
  auto o = v.try_cast<JObject>();
  if (!o.has_value()) Fail(where + " must be a JSON object");
  return *o;
}

JArray AsArray(const Any& v, const std::string& where) {
  auto a = v.try_cast<JArray>();
  if (!a.has_value()) Fail(where + " must be a JSON array");
  return *a;
}

Any Field(const JObject& o, const char* key, const std::string& where) {
  auto it = o.find(Any(String(key)));
  if (it == o.end()) Fail(where + " has no field \"" + key + "\"");
  return (*it).second;
}

std::string AsString(const Any& v, const std::string& where) {
  auto s = v.as<String>();
  if (!s.has_value()) Fail(where + " must be a string");
  return std::string(*s);
}

int64_t AsInt(const Any& v, const std::string& where) {
  if (v.as<bool>().has_value()) Fail(where + " must be an integer, not a boolean");
  auto i = v.as<int64_t>();
  if (!i.has_value()) Fail(where + " must be an integer");
  return *i;
}

double AsFloat(const Any& v, const std::string& where) {
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

std::vector<int64_t> AsInts(const Any& v, const std::string& where) {
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
  int64_t Int(const char* key) const { return AsInt(Value(key, "int"), Where(key)); }
  bool Bool(const char* key) const {
    auto b = Value(key, "bool").as<bool>();
    if (!b.has_value()) Fail(Where(key) + " must be true or false");
    return *b;
  }
  double Float(const char* key) const { return AsFloat(Value(key, "float"), Where(key)); }
  std::string Str(const char* key) const { return AsString(Value(key, "str"), Where(key)); }
  std::vector<int64_t> Ints(const char* key) const { return AsInts(Value(key, "int[]"), Where(key)); }

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
  std::vector<int64_t> shape;
  int64_t numel = 1;
  int slot = -1;  // input index, constant index, or -1
};

// Per-call buffers: one float pointer per tensor of the graph.
using Step = std::function<void(float* const* buf)>;

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << (s.size() == 1 ? ",)" : ")");
  return os.str();
}

int64_t NormAxis(int64_t axis, size_t ndim, const std::string& where) {
  int64_t n = static_cast<int64_t>(ndim);
  if (axis < -n || axis >= n) Fail(where + ": axis " + std::to_string(axis) + " out of range");
  return axis < 0 ? axis + n : axis;
}

std::vector<int64_t> Broadcast(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
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

class Graph {
 public:
  Graph(const std::string& symbol, const std::string& text,
        const std::map<std::string, const std::vector<float>*>& consts) {
    CheckJsonDepth(text);
    String error;
    Any root = tvm::ffi::json::Parse(String(text), &error);
    if (error.size() != 0) Fail("graph JSON does not parse: " + std::string(error));
    JObject g = AsObject(root, "graph");
    if (AsString(Field(g, "format", "graph"), "graph format") != "byoc.json_runtime.graph")
      Fail("graph format is not byoc.json_runtime.graph");
    int64_t version = AsInt(Field(g, "version", "graph"), "graph version");
    if (version != kGraphVersion)
      Fail("graph schema version " + std::to_string(version) + " is not supported (this runtime reads " +
           std::to_string(kGraphVersion) + "); rebuild the artifact with this byoc version");
    if (AsString(Field(g, "symbol", "graph"), "graph symbol") != symbol)
      Fail("graph symbol does not match the module symbol " + symbol);

    JArray tensors = AsArray(Field(g, "tensors", "graph"), "graph tensors");
    for (size_t i = 0; i < tensors.size(); ++i) {
      std::string where = "tensor #" + std::to_string(i);
      JObject t = AsObject(tensors[i], where);
      TensorInfo info;
      info.name = AsString(Field(t, "name", where), where + " name");
      where = "tensor " + info.name;
      std::string kind = AsString(Field(t, "kind", where), where + " kind");
      info.kind = kind == "input" ? Kind::kInput : kind == "const" ? Kind::kConst : Kind::kOp;
      if (kind != "input" && kind != "const" && kind != "op") Fail(where + " has unknown kind " + kind);
      if (AsString(Field(t, "dtype", where), where + " dtype") != "float32")
        Fail(where + " is not float32 (the reference kernels are float32 only)");
      info.shape = AsInts(Field(t, "shape", where), where + " shape");
      if (info.shape.size() > BYOC_MAX_RANK) Fail(where + " has rank above " + std::to_string(BYOC_MAX_RANK));
      for (int64_t d : info.shape) {
        if (d < 0 || (d > 0 && info.numel > (int64_t{1} << 40) / d)) Fail(where + " has an invalid shape");
        info.numel *= d;
      }
      if (index_.count(info.name)) Fail(where + " is declared twice");
      index_[info.name] = static_cast<int>(tensors_.size());
      tensors_.push_back(info);
    }

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

    std::vector<bool> produced(tensors_.size(), false);
    for (const TensorInfo& t : tensors_) produced[index_[t.name]] = t.kind != Kind::kOp;
    JArray nodes = AsArray(Field(g, "nodes", "graph"), "graph nodes");
    std::vector<std::pair<std::vector<int>, JObject>> body_ops;  // flattened (inputs+output ids, op)
    std::vector<std::string> wheres;
    std::vector<int> node_of;
    for (size_t n = 0; n < nodes.size(); ++n) {
      std::string where = "node #" + std::to_string(n);
      JObject node = AsObject(nodes[n], where);
      where = "node #" + std::to_string(n) + " (" + AsString(Field(node, "op", where), where + " op") + ")";
      JArray body = AsArray(Field(node, "body", where), where + " body");
      if (body.size() == 0) Fail(where + " has an empty body");
      for (size_t k = 0; k < body.size(); ++k) {
        std::string w = where + " body[" + std::to_string(k) + "]";
        JObject op = AsObject(body[k], w);
        w += " " + AsString(Field(op, "kernel", w), w + " kernel");
        std::vector<int> ids;
        JArray ins = AsArray(Field(op, "inputs", w), w + " inputs");
        for (size_t i = 0; i < ins.size(); ++i) {
          int id = Lookup(AsString(ins[i], w + " input"), w);
          if (!produced[id]) Fail(w + " reads " + tensors_[id].name + " before it is computed");
          ids.push_back(id);
        }
        int out = Lookup(AsString(Field(op, "output", w), w + " output"), w);
        if (produced[out] || tensors_[out].kind != Kind::kOp) Fail(w + " writes " + tensors_[out].name + ", which is already defined");
        produced[out] = true;
        ids.push_back(out);
        body_ops.emplace_back(ids, op);
        wheres.push_back(w);
        node_of.push_back(static_cast<int>(n));
      }
    }
    JArray outputs = AsArray(Field(g, "outputs", "graph"), "graph outputs");
    for (size_t i = 0; i < outputs.size(); ++i) {
      int id = Lookup(AsString(outputs[i], "graph output"), "graph outputs");
      if (!produced[id]) Fail("graph output " + tensors_[id].name + " is never computed");
      outputs_.push_back(id);
    }

    // Uses per tensor, so a conv whose raw result is read elsewhere is not fused.
    std::vector<int> uses(tensors_.size(), 0);
    for (auto& op : body_ops)
      for (size_t i = 0; i + 1 < op.first.size(); ++i) ++uses[op.first[i]];
    for (int id : outputs_) ++uses[id];

    for (size_t k = 0; k < body_ops.size(); ++k) {
      const std::vector<int>& ids = body_ops[k].first;
      std::vector<int> ins(ids.begin(), ids.end() - 1);
      int out = ids.back();
      Attrs attrs(AsObject(Field(body_ops[k].second, "attrs", wheres[k]), wheres[k] + " attrs"), wheres[k]);
      std::string kernel = AsString(Field(body_ops[k].second, "kernel", wheres[k]), wheres[k]);
      if (kernel == "relax.nn.conv2d") {
        // Fuse a per-channel constant bias and a relu of the same node into the kernel.
        int bias = -1, relu = 0, last = out;
        size_t next = k + 1;
        auto same_node = [&](size_t j) { return j < body_ops.size() && node_of[j] == node_of[k]; };
        if (same_node(next) && uses[last] == 1 &&
            AsString(Field(body_ops[next].second, "kernel", wheres[next]), wheres[next]) == "relax.add") {
          const std::vector<int>& a = body_ops[next].first;
          int other = a[0] == last ? a[1] : a[1] == last ? a[0] : -1;
          if (a.size() == 3 && other >= 0 && IsChannelBias(other, out) &&
              tensors_[a[2]].shape == tensors_[out].shape) {
            bias = other;
            last = a[2];
            ++next;
          }
        }
        if (same_node(next) && uses[last] == 1 &&
            AsString(Field(body_ops[next].second, "kernel", wheres[next]), wheres[next]) == "relax.nn.relu" &&
            body_ops[next].first[0] == last && tensors_[body_ops[next].first[1]].shape == tensors_[out].shape) {
          relu = 1;
          last = body_ops[next].first[1];
          ++next;
        }
        steps_.push_back(Conv2d(ins, out, last, bias, relu, attrs, wheres[k]));
        k = next - 1;
      } else {
        steps_.push_back(Compile(kernel, ins, out, attrs, wheres[k]));
      }
    }
  }

  size_t num_inputs() const { return inputs_.size(); }
  size_t num_outputs() const { return outputs_.size(); }
  const TensorInfo& input(size_t i) const { return tensors_[inputs_[i]]; }
  const TensorInfo& output(size_t i) const { return tensors_[outputs_[i]]; }

  // Runs the graph. Reads only immutable state; intermediates live in `temps`.
  void Run(float* const* in, float* const* out) const {
    std::vector<float*> buf(tensors_.size(), nullptr);
    std::vector<std::vector<float>> temps;
    temps.reserve(tensors_.size());
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const TensorInfo& t = tensors_[i];
      if (t.kind == Kind::kInput) buf[i] = in[t.slot];
      if (t.kind == Kind::kConst) buf[i] = const_cast<float*>(const_data_[t.slot]->data());
    }
    // An op result that is a graph output is written straight into the output buffer.
    std::vector<bool> direct(outputs_.size(), false);
    for (size_t i = 0; i < outputs_.size(); ++i) {
      int id = outputs_[i];
      if (tensors_[id].kind == Kind::kOp && buf[id] == nullptr) {
        buf[id] = out[i];
        direct[i] = true;
      }
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (buf[i] == nullptr) {
        temps.emplace_back(static_cast<size_t>(std::max<int64_t>(tensors_[i].numel, 1)));
        buf[i] = temps.back().data();
      }
    }
    for (const Step& step : steps_) step(buf.data());
    for (size_t i = 0; i < outputs_.size(); ++i) {
      if (!direct[i]) {
        const TensorInfo& t = tensors_[outputs_[i]];
        if (t.numel > 0) std::memcpy(out[i], buf[outputs_[i]], sizeof(float) * static_cast<size_t>(t.numel));
      }
    }
  }

 private:
  int Lookup(const std::string& name, const std::string& where) const {
    auto it = index_.find(name);
    if (it == index_.end()) Fail(where + " names an undeclared tensor " + name);
    return it->second;
  }

  const std::vector<int64_t>& Shape(int id) const { return tensors_[id].shape; }

  bool IsChannelBias(int bias, int conv_out) const {
    const TensorInfo& b = tensors_[bias];
    const std::vector<int64_t>& o = Shape(conv_out);
    if (b.kind != Kind::kConst || o.size() != 4) return false;
    return b.shape == std::vector<int64_t>{1, o[1], 1, 1} || b.shape == std::vector<int64_t>{o[1], 1, 1};
  }

  void Arity(const std::vector<int>& ins, size_t n, const std::string& where) const {
    if (ins.size() != n) Fail(where + " takes " + std::to_string(n) + " inputs, got " + std::to_string(ins.size()));
  }

  void SameShape(int a, int b, const std::string& where) const {
    if (Shape(a) != Shape(b))
      Fail(where + ": output shape " + ShapeStr(Shape(b)) + " differs from " + ShapeStr(Shape(a)));
  }

  Step Conv2d(const std::vector<int>& ins, int conv_out, int out, int bias, int relu, const Attrs& a,
              const std::string& where) const {
    Arity(ins, 2, where);
    if (a.Str("data_layout") != "NCHW" || a.Str("kernel_layout") != "OIHW" || a.Str("out_layout") != "NCHW")
      Fail(where + ": only NCHW/OIHW layouts are supported");
    const auto& x = Shape(ins[0]);
    const auto& w = Shape(ins[1]);
    const auto& y = Shape(conv_out);
    if (x.size() != 4 || w.size() != 4 || y.size() != 4) Fail(where + ": conv2d tensors must be 4-D");
    auto st = a.Ints("strides"), pad = a.Ints("padding"), dil = a.Ints("dilation");
    int64_t groups = a.Int("groups");
    if (st.size() != 2 || dil.size() != 2 || (pad.size() != 4 && pad.size() != 2))
      Fail(where + ": strides/dilation need 2 values and padding 2 or 4");
    if (pad.size() == 2) pad = {pad[0], pad[1], pad[0], pad[1]};
    for (int64_t v : st) if (v < 1) Fail(where + ": strides must be positive");
    for (int64_t v : dil) if (v < 1) Fail(where + ": dilation must be positive");
    for (int64_t v : pad) if (v < 0) Fail(where + ": padding must not be negative");
    if (groups < 1 || x[1] != w[1] * groups || w[0] % groups != 0 || y[0] != x[0] || y[1] != w[0])
      Fail(where + ": channels of " + ShapeStr(x) + " and weight " + ShapeStr(w) + " do not match groups=" +
           std::to_string(groups));
    for (int d = 0; d < 2; ++d) {
      int64_t span = dil[d] * (w[2 + d] - 1) + 1;
      int64_t expect = (x[2 + d] + pad[d] + pad[d + 2] - span) / st[d] + 1;
      if (y[2 + d] != expect) Fail(where + ": output shape " + ShapeStr(y) + " does not follow from the attributes");
    }
    int64_t n = x[0], c = x[1], h = x[2], wd = x[3], o = w[0], kh = w[2], kw = w[3], oh = y[2], ow = y[3];
    int64_t sh = st[0], sw = st[1], pt = pad[0], pl = pad[1], dh = dil[0], dw = dil[1];
    int xi = ins[0], wi = ins[1];
    return [=](float* const* buf) {
      byoc_k_conv2d(buf[xi], buf[wi], bias >= 0 ? buf[bias] : nullptr, buf[out], n, c, h, wd, o, kh, kw, oh,
                    ow, sh, sw, pt, pl, dh, dw, groups, relu);
    };
  }

  Step Binary(int kind, const std::vector<int>& ins, int out, const std::string& where) const {
    Arity(ins, 2, where);
    auto as = Shape(ins[0]), bs = Shape(ins[1]), os = Shape(out);
    if (Broadcast(as, bs, where) != os) Fail(where + ": output shape " + ShapeStr(os) + " is not the broadcast shape");
    int a = ins[0], b = ins[1];
    return [=](float* const* buf) {
      byoc_k_binary(kind, buf[a], as.data(), static_cast<int>(as.size()), buf[b], bs.data(),
                    static_cast<int>(bs.size()), buf[out], os.data(), static_cast<int>(os.size()));
    };
  }

  Step Unary(int kind, const std::vector<int>& ins, int out, float lo, float hi, const std::string& where) const {
    Arity(ins, 1, where);
    SameShape(ins[0], out, where);
    int x = ins[0];
    int64_t numel = tensors_[out].numel;
    return [=](float* const* buf) { byoc_k_unary(kind, buf[x], buf[out], numel, lo, hi); };
  }

  Step Matmul(const std::vector<int>& ins, int out, const std::string& where) const {
    Arity(ins, 2, where);
    auto as = Shape(ins[0]), bs = Shape(ins[1]), os = Shape(out);
    if (as.empty() || bs.empty()) Fail(where + ": matmul of a scalar is not supported");
    if (as.back() != (bs.size() >= 2 ? bs[bs.size() - 2] : bs[0]))
      Fail(where + ": inner dimensions of " + ShapeStr(as) + " and " + ShapeStr(bs) + " differ");
    std::vector<int64_t> ab(as.begin(), as.end() - std::min<size_t>(as.size(), 2));
    std::vector<int64_t> bb(bs.begin(), bs.end() - std::min<size_t>(bs.size(), 2));
    std::vector<int64_t> expect = Broadcast(ab, bb, where);
    if (as.size() >= 2) expect.push_back(as[as.size() - 2]);
    if (bs.size() >= 2) expect.push_back(bs.back());
    if (expect != os) Fail(where + ": output shape " + ShapeStr(os) + " should be " + ShapeStr(expect));
    int a = ins[0], b = ins[1];
    return [=](float* const* buf) {
      byoc_k_matmul(buf[a], as.data(), static_cast<int>(as.size()), buf[b], bs.data(),
                    static_cast<int>(bs.size()), buf[out], os.data(), static_cast<int>(os.size()));
    };
  }

  Step Pool(bool max, const std::vector<int>& ins, int out, const Attrs& a, const std::string& where) const {
    Arity(ins, 1, where);
    if (a.Str("layout") != "NCHW" || a.Str("out_layout") != "NCHW") Fail(where + ": only NCHW is supported");
    const auto& x = Shape(ins[0]);
    const auto& y = Shape(out);
    if (x.size() != 4 || y.size() != 4 || x[0] != y[0] || x[1] != y[1]) Fail(where + ": pooling needs matching 4-D NCHW tensors");
    auto k = a.Ints("pool_size"), st = a.Ints("strides"), pad = a.Ints("padding"), dil = a.Ints("dilation");
    if (k.size() != 2 || st.size() != 2 || pad.size() != 4 || dil.size() != 2)
      Fail(where + ": pool_size/strides/dilation need 2 values and padding 4");
    for (int64_t v : k) if (v < 1) Fail(where + ": pool_size must be positive");
    for (int64_t v : st) if (v < 1) Fail(where + ": strides must be positive");
    for (int64_t v : dil) if (v < 1) Fail(where + ": dilation must be positive");
    for (int64_t v : pad) if (v < 0) Fail(where + ": padding must not be negative");
    // The kernels bounds-check every window, so any output size is memory safe.
    int64_t n = x[0], c = x[1], h = x[2], wd = x[3], oh = y[2], ow = y[3];
    int xi = ins[0];
    if (max) {
      return [=](float* const* buf) {
        byoc_k_maxpool2d(buf[xi], buf[out], n, c, h, wd, oh, ow, k[0], k[1], st[0], st[1], pad[0], pad[1], dil[0],
                         dil[1]);
      };
    }
    if (dil[0] != 1 || dil[1] != 1) Fail(where + ": average pooling with dilation is not supported");
    if (a.Bool("ceil_mode")) Fail(where + ": average pooling with ceil_mode is not supported");
    int cip = a.Bool("count_include_pad") ? 1 : 0;
    return [=](float* const* buf) {
      byoc_k_avgpool2d(buf[xi], buf[out], n, c, h, wd, oh, ow, k[0], k[1], st[0], st[1], pad[0], pad[1], pad[2],
                       pad[3], cip);
    };
  }

  Step Mean(const std::vector<int>& ins, int out, const Attrs& a, const std::string& where) const {
    Arity(ins, 1, where);
    auto xs = Shape(ins[0]);
    std::vector<int> reduce(xs.size(), a.IsNone("axis") ? 1 : 0);
    if (!a.IsNone("axis"))
      for (int64_t ax : a.Ints("axis")) reduce[NormAxis(ax, xs.size(), where)] = 1;
    int64_t kept = 1;
    for (size_t d = 0; d < xs.size(); ++d) if (!reduce[d]) kept *= xs[d];
    if (kept != tensors_[out].numel) Fail(where + ": output shape " + ShapeStr(Shape(out)) + " does not match the reduced axes");
    int x = ins[0];
    return [=](float* const* buf) {
      byoc_k_mean(buf[x], xs.data(), static_cast<int>(xs.size()), reduce.data(), buf[out]);
    };
  }

  Step Softmax(const std::vector<int>& ins, int out, const Attrs& a, const std::string& where) const {
    Arity(ins, 1, where);
    SameShape(ins[0], out, where);
    const auto& xs = Shape(ins[0]);
    if (xs.empty()) Fail(where + ": softmax of a scalar is not supported");
    int64_t axis = NormAxis(a.Int("axis"), xs.size(), where), outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= xs[d];
    for (size_t d = axis + 1; d < xs.size(); ++d) inner *= xs[d];
    int64_t len = xs[axis];
    int x = ins[0];
    return [=](float* const* buf) { byoc_k_softmax(buf[x], buf[out], outer, len, inner); };
  }

  Step Copy(const std::vector<int>& ins, int out, const std::string& where) const {
    Arity(ins, 1, where);
    if (tensors_[ins[0]].numel != tensors_[out].numel) Fail(where + ": reshape changes the number of elements");
    int x = ins[0];
    size_t bytes = sizeof(float) * static_cast<size_t>(tensors_[out].numel);
    return [=](float* const* buf) {
      if (bytes) std::memcpy(buf[out], buf[x], bytes);
    };
  }

  Step Concat(const std::vector<int>& ins, int out, const Attrs& a, const std::string& where) const {
    if (ins.empty()) Fail(where + ": concat needs inputs");
    const auto& os = Shape(out);
    if (os.empty()) Fail(where + ": concat of scalars is not supported");
    int64_t axis = NormAxis(a.Int("axis"), os.size(), where), total = 0, outer = 1, inner = 1;
    std::vector<int64_t> lens;
    for (int id : ins) {
      const auto& s = Shape(id);
      if (s.size() != os.size()) Fail(where + ": inputs and output ranks differ");
      for (size_t d = 0; d < s.size(); ++d)
        if (static_cast<int64_t>(d) != axis && s[d] != os[d]) Fail(where + ": input " + ShapeStr(s) + " does not fit " + ShapeStr(os));
      lens.push_back(s[axis]);
      total += s[axis];
    }
    if (total != os[axis]) Fail(where + ": inputs do not add up to the output along the axis");
    for (int64_t d = 0; d < axis; ++d) outer *= os[d];
    for (size_t d = axis + 1; d < os.size(); ++d) inner *= os[d];
    std::vector<int> srcs = ins;
    return [=](float* const* buf) {
      std::vector<const float*> xs;
      for (int id : srcs) xs.push_back(buf[id]);
      byoc_k_concat(xs.data(), lens.data(), static_cast<int>(xs.size()), buf[out], outer, inner);
    };
  }

  Step Transpose(const std::vector<int>& ins, int out, const Attrs& a, const std::string& where) const {
    Arity(ins, 1, where);
    auto xs = Shape(ins[0]);
    std::vector<int64_t> perm;
    if (a.IsNone("axes")) {
      for (size_t d = xs.size(); d > 0; --d) perm.push_back(static_cast<int64_t>(d - 1));
    } else {
      for (int64_t ax : a.Ints("axes")) perm.push_back(NormAxis(ax, xs.size(), where));
    }
    std::vector<int64_t> expect;
    std::vector<bool> seen(xs.size(), false);
    if (perm.size() != xs.size()) Fail(where + ": axes is not a permutation");
    for (int64_t p : perm) {
      if (seen[p]) Fail(where + ": axes is not a permutation");
      seen[p] = true;
      expect.push_back(xs[p]);
    }
    if (expect != Shape(out)) Fail(where + ": output shape " + ShapeStr(Shape(out)) + " should be " + ShapeStr(expect));
    int x = ins[0];
    return [=](float* const* buf) {
      byoc_k_transpose(buf[x], xs.data(), static_cast<int>(xs.size()), perm.data(), buf[out]);
    };
  }

  Step Compile(const std::string& kernel, const std::vector<int>& ins, int out, const Attrs& a,
               const std::string& where) const {
    if (kernel == "relax.add") return Binary(BYOC_ADD, ins, out, where);
    if (kernel == "relax.subtract") return Binary(BYOC_SUB, ins, out, where);
    if (kernel == "relax.multiply") return Binary(BYOC_MUL, ins, out, where);
    if (kernel == "relax.divide") return Binary(BYOC_DIV, ins, out, where);
    if (kernel == "relax.nn.relu") return Unary(BYOC_RELU, ins, out, 0.0f, 0.0f, where);
    if (kernel == "relax.sigmoid") return Unary(BYOC_SIGMOID, ins, out, 0.0f, 0.0f, where);
    if (kernel == "relax.tanh") return Unary(BYOC_TANH, ins, out, 0.0f, 0.0f, where);
    if (kernel == "relax.clip")
      return Unary(BYOC_CLIP, ins, out, static_cast<float>(a.Float("min")), static_cast<float>(a.Float("max")), where);
    if (kernel == "relax.matmul") return Matmul(ins, out, where);
    if (kernel == "relax.nn.max_pool2d") return Pool(true, ins, out, a, where);
    if (kernel == "relax.nn.avg_pool2d") return Pool(false, ins, out, a, where);
    if (kernel == "relax.mean") return Mean(ins, out, a, where);
    if (kernel == "relax.nn.softmax") return Softmax(ins, out, a, where);
    if (kernel == "relax.reshape") return Copy(ins, out, where);
    if (kernel == "relax.concat") return Concat(ins, out, a, where);
    if (kernel == "relax.permute_dims") return Transpose(ins, out, a, where);
    Fail(where + ": no kernel for " + kernel);
  }

  std::vector<TensorInfo> tensors_;
  std::map<std::string, int> index_;
  std::vector<int> inputs_, outputs_;
  std::vector<const std::vector<float>*> const_data_;
  std::vector<Step> steps_;
};

// ---------------------------------------------------------------------------
// The module.
// ---------------------------------------------------------------------------
class JsonRuntimeModuleObj : public ModuleObj {
 public:
  JsonRuntimeModuleObj(std::string symbol, std::string graph_json,
                       std::vector<std::pair<std::string, std::vector<float>>> consts)
      : symbol_(std::move(symbol)), graph_json_(std::move(graph_json)), consts_(std::move(consts)) {
    std::map<std::string, const std::vector<float>*> by_name;
    for (const auto& c : consts_) {
      if (!by_name.emplace(c.first, &c.second).second) Fail("constant " + c.first + " is given twice");
    }
    graph_ = std::make_unique<Graph>(symbol_, graph_json_, by_name);
  }

  const char* kind() const final { return kKind; }

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
    return std::nullopt;
  }

  Bytes SaveToBytes() const final {
    Writer w;
    w.Raw(kMagic, sizeof(kMagic));
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
    if (size < sizeof(kMagic) + 16 || std::memcmp(data, kMagic, sizeof(kMagic)) != 0)
      Fail("not a json_runtime module blob (bad magic or too short: " + std::to_string(size) + " bytes)");
    Reader tail(data + size - 8, 8);
    if (tail.Uint(8, "checksum") != Fnv1a(data, size - 8))
      Fail("corrupted module blob: checksum mismatch (the artifact file is damaged; export it again)");
    Reader r(data + sizeof(kMagic), size - sizeof(kMagic) - 8);
    uint64_t version = r.Uint(4, "version");
    if (version != kBlobVersion)
      Fail("module blob version " + std::to_string(version) + " is not supported (this runtime reads " +
           std::to_string(kBlobVersion) + "); rebuild the artifact with this byoc version");
    r.Uint(4, "reserved");
    std::string symbol = r.Str("symbol");
    std::string graph = r.Str("graph JSON");
    uint64_t count = r.Uint(8, "constant count");
    if (count > r.Remaining() / 16) Fail("corrupted module blob: constant count " + std::to_string(count) + " is impossible");
    std::vector<std::pair<std::string, std::vector<float>>> consts;
    for (uint64_t i = 0; i < count; ++i) {
      std::string name = r.Str("constant name");
      consts.emplace_back(std::move(name), r.Floats("constant data"));
    }
    if (r.Remaining() != 0) Fail("corrupted module blob: " + std::to_string(r.Remaining()) + " unexpected trailing bytes");
    return Module(tvm::ffi::make_object<JsonRuntimeModuleObj>(std::move(symbol), std::move(graph), std::move(consts)));
  }

 private:
  float* Arg(const PackedArgs& args, int i, const TensorInfo& t) const {
    std::ostringstream where;
    where << symbol_ << ": argument " << i;
    auto dl = args[i].try_cast<DLTensor*>();
    if (!dl.has_value()) TVM_FFI_THROW(TypeError) << where.str() << " is not a tensor";
    const DLTensor* x = *dl;
    if (x->device.device_type != kDLCPU) TVM_FFI_THROW(ValueError) << where.str() << " is not on the CPU";
    if (x->dtype.code != kDLFloat || x->dtype.bits != 32 || x->dtype.lanes != 1)
      TVM_FFI_THROW(TypeError) << where.str() << " is not float32";
    std::vector<int64_t> shape(x->shape, x->shape + x->ndim);
    if (shape != t.shape)
      TVM_FFI_THROW(ValueError) << where.str() << " has shape " << ShapeStr(shape) << ", expected " << ShapeStr(t.shape);
    if (!tvm::ffi::IsContiguous(*x)) TVM_FFI_THROW(ValueError) << where.str() << " is not contiguous";
    return reinterpret_cast<float*>(static_cast<char*>(x->data) + x->byte_offset);
  }

  void Call(const PackedArgs& args) const {
    size_t ni = graph_->num_inputs(), no = graph_->num_outputs();
    if (static_cast<size_t>(args.size()) != ni + no)
      TVM_FFI_THROW(TypeError) << symbol_ << ": expected " << ni << " input and " << no << " output tensors, got "
                               << args.size() << " arguments";
    std::vector<float*> in(ni), out(no);
    for (size_t i = 0; i < ni; ++i) in[i] = Arg(args, static_cast<int>(i), graph_->input(i));
    for (size_t i = 0; i < no; ++i) out[i] = Arg(args, static_cast<int>(ni + i), graph_->output(i));
    graph_->Run(in.data(), out.data());
  }

  const std::string symbol_;
  const std::string graph_json_;
  const std::vector<std::pair<std::string, std::vector<float>>> consts_;  // the only copy of the weights
  std::unique_ptr<const Graph> graph_;
};

Module Create(const String& symbol, const String& graph_json, const Array<String>& names,
              const Array<tvm::ffi::Tensor>& values) {
  if (names.size() != values.size()) Fail("create: got " + std::to_string(names.size()) + " constant names and " +
                                          std::to_string(values.size()) + " constant tensors");
  std::vector<std::pair<std::string, std::vector<float>>> consts;
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
  return Module(tvm::ffi::make_object<JsonRuntimeModuleObj>(std::string(symbol), std::string(graph_json),
                                                            std::move(consts)));
}

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef()
      .def("byoc.json_runtime.create", Create)
      .def("byoc.json_runtime.format_version", []() -> int64_t { return kBlobVersion * 1000 + kGraphVersion; })
      .def("byoc.json_runtime.save_to_bytes",
           [](const Module& mod) -> Bytes {
             if (std::string(mod->kind()) != kKind) Fail("save_to_bytes: not a byoc_json_runtime module");
             return mod->SaveToBytes();
           })
      .def("ffi.Module.load_from_bytes.byoc_json_runtime", JsonRuntimeModuleObj::LoadFromBytes);
}

}  // namespace json_runtime
}  // namespace byoc
