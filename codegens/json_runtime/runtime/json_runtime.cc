/*
 * json_runtime.cc -- byoc's JSON-graph runtime module with the reference kernels.
 *
 * A module holds one partition (codegens/graph_runtime/: blob, parsing, validation,
 * the tvm-ffi module). Calling the function named <symbol> with
 * (inputs..., outputs...) runs the graph with the reference kernels of
 * byoc_kernels.h, shared with the C-source codegen.
 *
 * The executor is immutable after construction: the graph is compiled once
 * into a list of steps; every call allocates its own intermediates, so one
 * module runs on many threads at once. Constants are used in place from the
 * module (one copy of the weights).
 */
#include <functional>

#include "byoc_kernels.h"
#include "graph_runtime/module.h"

namespace byoc {
namespace graph_runtime {
const char* const kRuntimeName = "json_runtime";
}  // namespace graph_runtime

namespace json_runtime {

using namespace byoc::graph_runtime;  // NOLINT: this file is one runtime built on it

// Per-call buffers: one float pointer per tensor of the graph.
using Step = std::function<void(float* const* buf)>;

class ReferenceExecutor {
 public:
  static constexpr const char* kName = "json_runtime";
  static constexpr char kMagic[8] = {'B', 'Y', 'O', 'C', 'J', 'S', 'R', 'T'};
  static constexpr int64_t kMinGraphVersion = 1;
  // Its graphs hold no CPU-dependent ops (only dnnl's lowering makes them).
  static std::set<std::string> CpuFeatures() { return {}; }

  explicit ReferenceExecutor(const ParsedGraph& graph) : g_(graph) {
    for (const TensorInfo& t : g_.tensors())
      if (t.dtype != "float32") Fail("tensor " + t.name + " is " + t.dtype + " (the reference kernels are float32 only)");
    const std::vector<BodyOp>& ops = g_.ops();
    for (size_t k = 0; k < ops.size(); ++k) {
      const BodyOp& op = ops[k];
      Attrs attrs(op.attrs, op.where);
      if (op.kernel != "relax.nn.conv2d") {
        steps_.push_back(Compile(op.kernel, op.inputs, op.output, attrs, op.where));
        continue;
      }
      // Fuse a per-channel constant bias and a relu of the same node into the
      // kernel, unless the conv's raw result is read elsewhere.
      int bias = -1, relu = 0, last = op.output;
      size_t next = k + 1;
      auto same_node = [&](size_t j) { return j < ops.size() && ops[j].node == op.node; };
      if (same_node(next) && g_.uses(last) == 1 && ops[next].kernel == "relax.add") {
        const std::vector<int>& a = ops[next].inputs;
        int other = a.size() != 2 ? -1 : a[0] == last ? a[1] : a[1] == last ? a[0] : -1;
        if (other >= 0 && IsChannelBias(other, op.output) && Shape(ops[next].output) == Shape(op.output)) {
          bias = other;
          last = ops[next].output;
          ++next;
        }
      }
      if (same_node(next) && g_.uses(last) == 1 && ops[next].kernel == "relax.nn.relu" &&
          ops[next].inputs.size() == 1 && ops[next].inputs[0] == last && Shape(ops[next].output) == Shape(op.output)) {
        relu = 1;
        last = ops[next].output;
        ++next;
      }
      steps_.push_back(Conv2d(op.inputs, op.output, last, bias, relu, attrs, op.where));
      k = next - 1;
    }
  }

  // A call allocates one buffer per intermediate (an op result that is not a graph output).
  MemoryUse Memory() const {
    std::vector<bool> output(g_.tensors().size(), false);
    for (int id : g_.outputs()) output[id] = true;
    MemoryUse use;
    for (size_t i = 0; i < g_.tensors().size(); ++i) {
      const TensorInfo& t = g_.tensor(static_cast<int>(i));
      if (t.kind == Kind::kOp && !output[i]) use.workspace_bytes += sizeof(float) * std::max<int64_t>(t.numel, 1);
    }
    return use;
  }

  // Runs the graph. Reads only immutable state; intermediates live in `temps`.
  void Run(float* const* in, float* const* out) const {
    const std::vector<TensorInfo>& tensors = g_.tensors();
    const std::vector<int>& outputs = g_.outputs();
    std::vector<float*> buf(tensors.size(), nullptr);
    std::vector<std::vector<float>> temps;
    temps.reserve(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TensorInfo& t = tensors[i];
      if (t.kind == Kind::kInput) buf[i] = in[t.slot];
      if (t.kind == Kind::kConst) buf[i] = const_cast<float*>(g_.const_data(static_cast<int>(i)).data());
    }
    // An op result that is a graph output is written straight into the output buffer.
    std::vector<bool> direct(outputs.size(), false);
    for (size_t i = 0; i < outputs.size(); ++i) {
      int id = outputs[i];
      if (tensors[id].kind == Kind::kOp && buf[id] == nullptr) {
        buf[id] = out[i];
        direct[i] = true;
      }
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (buf[i] == nullptr) {
        temps.emplace_back(static_cast<size_t>(std::max<int64_t>(tensors[i].numel, 1)));
        buf[i] = temps.back().data();
      }
    }
    for (const Step& step : steps_) step(buf.data());
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (!direct[i]) {
        const TensorInfo& t = tensors[outputs[i]];
        if (t.numel > 0) std::memcpy(out[i], buf[outputs[i]], sizeof(float) * static_cast<size_t>(t.numel));
      }
    }
  }

 private:
  const std::vector<int64_t>& Shape(int id) const { return g_.Shape(id); }

  bool IsChannelBias(int bias, int conv_out) const {
    const TensorInfo& b = g_.tensor(bias);
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
    const auto& x = Shape(ins[0]);
    const auto& w = Shape(ins[1]);
    const auto& y = Shape(conv_out);
    ConvGeometry g = CheckConv(a, x, w, y, 2, where);
    const auto &st = g.strides, &pad = g.padding, &dil = g.dilation;
    int64_t groups = g.groups;
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
    int64_t numel = g_.tensor(out).numel;
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
    if (kept != g_.tensor(out).numel) Fail(where + ": output shape " + ShapeStr(Shape(out)) + " does not match the reduced axes");
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
    if (g_.tensor(ins[0]).numel != g_.tensor(out).numel) Fail(where + ": reshape changes the number of elements");
    int x = ins[0];
    size_t bytes = sizeof(float) * static_cast<size_t>(g_.tensor(out).numel);
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

  const ParsedGraph& g_;
  std::vector<Step> steps_;
};

TVM_FFI_STATIC_INIT_BLOCK() { RegisterGraphRuntime<ReferenceExecutor>(); }

}  // namespace json_runtime
}  // namespace byoc
