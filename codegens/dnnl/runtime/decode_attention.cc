// decode_attention.cc -- a decoder's attention over its cache: softmax(Q K^T [element-wise ops]) V for a few query
// rows per head (a token, a few with grouped-query heads), one byoc kernel in place of oneDNN's primitives.
//
// At a decode step the products are small (8 heads x 1 row x 129 keys for a Qwen2-style token) and oneDNN's chain
// for them is K^T copied plain (reorder), the scores' matmul, the scale and the mask (eltwise, binary), the softmax
// and the second matmul: six primitives, each with its dispatch, about 30 us a layer on AMD EPYC (AVX-512,
// instrumented), where the arithmetic is about 2. The kernel (about 7 us) reads K through the transposed view the
// graph gives, and K and V through transformers' repetition of grouped kv heads (no copy of the cache), takes two
// query rows that share K and V at a time (each load serves both), keeps a row's scores in a buffer of its own,
// and writes the context straight into the layout the ops after it read.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "builder.h"
#include "cpu.h"
#include "kernels.h"
#include "simd.h"

namespace byoc {
namespace dnnl_runtime {

namespace {

// Every loop over a register array unrolled, so that the array stays in registers (a loop left rolled keeps it on
// the stack: each sum a load and a store, the kernel 5x slower).
#define BYOC_UNROLL8 _Pragma("GCC unroll 8")

// Query rows per head up to which the chain runs here: a token (x the query heads of a grouped kv head), or a few
// speculated tokens; a prompt's rows stay with oneDNN's matmuls, which block and thread them.
constexpr int64_t kDecodeRows = 16;

// One element-wise step on a row of scores, in the graph's order: alpha * s + beta, or s (op) an operand read at
// `rows[row] + t * key_stride` (the operand broadcast to the scores' view when the op reads it).
struct ScoreStep {
  enum class Kind { kLinear, kAdd, kMultiply, kSubtract } kind = Kind::kLinear;
  float alpha = 1.0f, beta = 0.0f;
  std::vector<int64_t> rows;  // the operand's offset at each score row (kAdd, kMultiply, kSubtract)
  int64_t key_stride = 0;     // 1, or 0 where the operand broadcasts over the keys
};

// Where each operand's groups (every axis but the last two) start, and the strides of its last two axes.
struct DecodeGeometry {
  int64_t groups = 0, rows = 0, keys = 0, depth = 0, width = 0;  // G, m, T, H (q and K), Hv (V and the output)
  std::vector<int64_t> q_at, kt_at, v_at, o_at;
  int64_t q_row = 0, kt_depth = 0, kt_key = 0, v_key = 0, o_row = 0;
};

// sum a[i] b[i] over n contiguous floats.
__attribute__((target("avx2,fma"))) inline float Dot(const float* a, const float* b, int64_t n) {
  __m256 even = _mm256_setzero_ps(), odd = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    even = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), even);
    odd = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), odd);
  }
  for (; i + 8 <= n; i += 8) even = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), even);
  float sum = SumOfLanes(_mm256_add_ps(even, odd));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// s[j] = q . K[j] for 8 keys, K's rows `key` floats apart, each contiguous over `depth`: eight sums side by side,
// added across at the end (a key at a time waits on each sum's horizontal add).
__attribute__((target("avx2,fma"))) inline void EightScores(const float* q, const float* k, int64_t key, int64_t depth,
                                                            float* s) {
  __m256 acc[8];
  BYOC_UNROLL8 for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
  int64_t h = 0;
  for (; h + 8 <= depth; h += 8) {
    const __m256 qv = _mm256_loadu_ps(q + h);
    BYOC_UNROLL8 for (int j = 0; j < 8; ++j) acc[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + j * key + h), acc[j]);
  }
  // [a01 a23 b01 b23 | a45 a67 b45 b67] ... -> [a0123 .. d0123 | a4567 .. d4567], [e .. h] -> [a .. h]
  const __m256 ab = _mm256_hadd_ps(acc[0], acc[1]), cd = _mm256_hadd_ps(acc[2], acc[3]);
  const __m256 ef = _mm256_hadd_ps(acc[4], acc[5]), gh = _mm256_hadd_ps(acc[6], acc[7]);
  const __m256 abcd = _mm256_hadd_ps(ab, cd), efgh = _mm256_hadd_ps(ef, gh);
  _mm256_storeu_ps(s, _mm256_add_ps(_mm256_permute2f128_ps(abcd, efgh, 0x20), _mm256_permute2f128_ps(abcd, efgh, 0x31)));
  for (; h < depth; ++h)
    BYOC_UNROLL8 for (int j = 0; j < 8; ++j) s[j] += q[h] * k[j * key + h];
}

// y[i] += a x[i] over n contiguous floats.
__attribute__((target("avx2,fma"))) inline void Axpy(float a, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

// o = sum over t of p[t] V[t], V's rows `key` floats apart, each contiguous over `width`: 64 columns at a time in
// registers, then 8, then one.
__attribute__((target("avx2,fma"))) inline void Context(const float* p, const float* v, int64_t key, int64_t keys,
                                                        int64_t width, float* o) {
  int64_t c = 0;
  for (; c + 64 <= width; c += 64) {
    __m256 acc[8];
    BYOC_UNROLL8 for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t t = 0; t < keys; ++t) {
      const __m256 pt = _mm256_set1_ps(p[t]);
      const float* row = v + t * key + c;
      BYOC_UNROLL8 for (int j = 0; j < 8; ++j) acc[j] = _mm256_fmadd_ps(pt, _mm256_loadu_ps(row + 8 * j), acc[j]);
    }
    BYOC_UNROLL8 for (int j = 0; j < 8; ++j) _mm256_storeu_ps(o + c + 8 * j, acc[j]);
  }
  for (; c + 8 <= width; c += 8) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t t = 0; t < keys; ++t) acc = _mm256_fmadd_ps(_mm256_set1_ps(p[t]), _mm256_loadu_ps(v + t * key + c), acc);
    _mm256_storeu_ps(o + c, acc);
  }
  for (; c < width; ++c) {
    float sum = 0.0f;
    for (int64_t t = 0; t < keys; ++t) sum += p[t] * v[t * key + c];
    o[c] = sum;
  }
}

// The four sums across the lanes of acc[0..3]: [a01 a23 b01 b23 | a45 a67 b45 b67], [c d] -> [a0123 .. d0123 |
// a4567 .. d4567] -> [a b c d].
__attribute__((target("avx2,fma"))) inline __m128 SumsOfFour(const __m256* acc) {
  const __m256 all = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
  return _mm_add_ps(_mm256_castps256_ps128(all), _mm256_extractf128_ps(all, 1));
}

// s0[j] = q0 . K[j] and s1[j] = q1 . K[j] for 4 keys: two query rows that read the same K share its loads (a
// grouped kv head's query heads re-read K from L2 once per row, one at a time).
__attribute__((target("avx2,fma"))) inline void FourScoresTwoRows(const float* q0, const float* q1, const float* k,
                                                                  int64_t key, int64_t depth, float* s0, float* s1) {
  __m256 acc0[4], acc1[4];
  BYOC_UNROLL8 for (int j = 0; j < 4; ++j) acc0[j] = acc1[j] = _mm256_setzero_ps();
  int64_t h = 0;
  for (; h + 8 <= depth; h += 8) {
    const __m256 a = _mm256_loadu_ps(q0 + h), b = _mm256_loadu_ps(q1 + h);
    BYOC_UNROLL8 for (int j = 0; j < 4; ++j) {
      const __m256 kj = _mm256_loadu_ps(k + j * key + h);
      acc0[j] = _mm256_fmadd_ps(a, kj, acc0[j]);
      acc1[j] = _mm256_fmadd_ps(b, kj, acc1[j]);
    }
  }
  _mm_storeu_ps(s0, SumsOfFour(acc0));
  _mm_storeu_ps(s1, SumsOfFour(acc1));
  for (; h < depth; ++h)
    BYOC_UNROLL8 for (int j = 0; j < 4; ++j) s0[j] += q0[h] * k[j * key + h], s1[j] += q1[h] * k[j * key + h];
}

// o0 = sum over t of p0[t] V[t] and o1 likewise, sharing V's loads: 32 columns at a time in registers, then 8,
// then one.
__attribute__((target("avx2,fma"))) inline void ContextTwoRows(const float* p0, const float* p1, const float* v,
                                                               int64_t key, int64_t keys, int64_t width, float* o0,
                                                               float* o1) {
  int64_t c = 0;
  for (; c + 32 <= width; c += 32) {
    __m256 acc0[4], acc1[4];
    BYOC_UNROLL8 for (int j = 0; j < 4; ++j) acc0[j] = acc1[j] = _mm256_setzero_ps();
    for (int64_t t = 0; t < keys; ++t) {
      const __m256 a = _mm256_set1_ps(p0[t]), b = _mm256_set1_ps(p1[t]);
      const float* row = v + t * key + c;
      BYOC_UNROLL8 for (int j = 0; j < 4; ++j) {
        const __m256 vj = _mm256_loadu_ps(row + 8 * j);
        acc0[j] = _mm256_fmadd_ps(a, vj, acc0[j]);
        acc1[j] = _mm256_fmadd_ps(b, vj, acc1[j]);
      }
    }
    BYOC_UNROLL8 for (int j = 0; j < 4; ++j) _mm256_storeu_ps(o0 + c + 8 * j, acc0[j]), _mm256_storeu_ps(o1 + c + 8 * j, acc1[j]);
  }
  if (c < width) {  // the last columns, a row at a time
    Context(p0, v + c, key, keys, width - c, o0 + c);
    Context(p1, v + c, key, keys, width - c, o1 + c);
  }
}

// s = softmax(s) over n floats, in place. A score whose exp underflows (a masked key: the lowest float added) gets
// exactly 0, as oneDNN's softmax and onnxruntime give it. Every pass 8 lanes wide: a scalar max waits on each
// compare, and these loops were half the kernel's time.
__attribute__((target("avx2,fma"))) inline void SoftmaxRow(float* s, int64_t n) {
  __m256 vtop = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) vtop = _mm256_max_ps(vtop, _mm256_loadu_ps(s + i));
  __m128 half = _mm_max_ps(_mm256_castps256_ps128(vtop), _mm256_extractf128_ps(vtop, 1));
  half = _mm_max_ps(half, _mm_movehl_ps(half, half));
  float top = _mm_cvtss_f32(_mm_max_ss(half, _mm_movehdup_ps(half)));
  for (; i < n; ++i) top = std::max(top, s[i]);
  vtop = _mm256_set1_ps(top);
  const __m256 lowest = _mm256_set1_ps(-87.3f);
  __m256 vsum = _mm256_setzero_ps();
  for (i = 0; i + 8 <= n; i += 8) {
    __m256 z = _mm256_sub_ps(_mm256_loadu_ps(s + i), vtop);
    __m256 e = _mm256_and_ps(exp_activation::ExpAvx2(z), _mm256_cmp_ps(z, lowest, _CMP_GE_OQ));
    _mm256_storeu_ps(s + i, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  float sum = SumOfLanes(vsum);
  for (; i < n; ++i) {
    float z = s[i] - top;
    s[i] = z >= -87.3f ? std::exp(z) : 0.0f;
    sum += s[i];
  }
  const float scale = 1.0f / sum;
  const __m256 vscale = _mm256_set1_ps(scale);
  for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(s + i, _mm256_mul_ps(_mm256_loadu_ps(s + i), vscale));
  for (; i < n; ++i) s[i] *= scale;
}

// s = alpha * s + beta over n floats.
__attribute__((target("avx2,fma"))) inline void LinearRow(float* s, int64_t n, float alpha, float beta) {
  const __m256 a = _mm256_set1_ps(alpha), b = _mm256_set1_ps(beta);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(s + i, _mm256_fmadd_ps(a, _mm256_loadu_ps(s + i), b));
  for (; i < n; ++i) s[i] = alpha * s[i] + beta;
}

// s = s (op) x over n floats, the op an add, a multiply or a subtract (`kind`), x read `stride` floats apart (1, or
// 0: one value for every key).
__attribute__((target("avx2,fma"))) inline void CombineRow(ScoreStep::Kind kind, float* s, const float* x,
                                                           int64_t stride, int64_t n) {
  auto vector_op = [kind](__m256 a, __m256 b) __attribute__((target("avx2,fma"))) {
    return kind == ScoreStep::Kind::kAdd ? _mm256_add_ps(a, b)
           : kind == ScoreStep::Kind::kMultiply ? _mm256_mul_ps(a, b) : _mm256_sub_ps(a, b);
  };
  int64_t i = 0;
  if (stride == 1) {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(s + i, vector_op(_mm256_loadu_ps(s + i), _mm256_loadu_ps(x + i)));
  } else if (stride == 0) {
    const __m256 one = _mm256_set1_ps(x[0]);
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(s + i, vector_op(_mm256_loadu_ps(s + i), one));
  }
  for (; i < n; ++i) {
    const float b = x[i * stride];
    s[i] = kind == ScoreStep::Kind::kAdd ? s[i] + b : kind == ScoreStep::Kind::kMultiply ? s[i] * b : s[i] - b;
  }
}

class DecodeAttention : public Kernel {
 public:
  DecodeAttention(DecodeGeometry g, std::vector<ScoreStep> steps, bool nan_to, float nan_value)
      : g_(std::move(g)), steps_(std::move(steps)), nan_to_(nan_to), nan_value_(nan_value) {
    // Score rows in order, two at a time where they read the same K and V through K's rows (the query rows of a
    // group, or query heads that share a kv head)
    const int64_t rows = g_.groups * g_.rows;
    for (int64_t row = 0; row < rows;) {
      const bool pair = row + 1 < rows && g_.kt_depth == 1 && KeysAt(row) == KeysAt(row + 1) &&
                        ValuesAt(row) == ValuesAt(row + 1);
      units_.push_back(row);
      row += pair ? 2 : 1;
    }
    units_.push_back(rows);
  }
  const char* Name() const override { return "decode_attention"; }

  void Run(const std::unordered_map<int, memory>& args) const override {
    const float* q = Data<const float>(args, DNNL_ARG_SRC);
    const float* kt = Data<const float>(args, DNNL_ARG_WEIGHTS);
    const float* v = Data<const float>(args, DNNL_ARG_SRC_1);
    float* o = Data<float>(args, DNNL_ARG_DST);
    std::vector<const float*> operands(steps_.size(), nullptr);
    for (size_t i = 0; i < steps_.size(); ++i)
      if (steps_[i].kind != ScoreStep::Kind::kLinear) operands[i] = Data<const float>(args, DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i));
    const int64_t work = g_.groups * g_.rows * g_.keys * (g_.depth + g_.width);
    const int64_t units = static_cast<int64_t>(units_.size()) - 1;
    SplitAcrossTeamIfLarge(units, work, [&](int64_t u0, int64_t u1) {
      std::vector<float> scores(2 * static_cast<size_t>(g_.keys));
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t row = units_[u];
        if (units_[u + 1] - row == 2) {
          Rows(q, kt, v, o, operands, row, scores.data());
        } else {
          Row(q, kt, v, o, operands, row, scores.data());
        }
      }
    });
  }

 private:
  int64_t KeysAt(int64_t row) const { return g_.kt_at[row / g_.rows]; }
  int64_t ValuesAt(int64_t row) const { return g_.v_at[row / g_.rows]; }
  const float* QueryAt(const float* q, int64_t row) const {
    return q + g_.q_at[row / g_.rows] + row % g_.rows * g_.q_row;
  }
  float* OutputAt(float* o, int64_t row) const { return o + g_.o_at[row / g_.rows] + row % g_.rows * g_.o_row; }

  // Score row `row` (a multi-index over the scores' leading dims and their rows), from Q K^T to the context.
  __attribute__((target("avx2,fma"))) void Row(const float* q, const float* kt, const float* v, float* o,
                                               const std::vector<const float*>& operands, int64_t row,
                                               float* s) const {
    const int64_t keys = g_.keys;
    const float* qi = QueryAt(q, row);
    const float* k = kt + KeysAt(row);
    if (g_.kt_depth == 1) {  // K's rows contiguous (K^T a transposed view of K)
      int64_t t = 0;
      for (; t + 8 <= keys; t += 8) EightScores(qi, k + t * g_.kt_key, g_.kt_key, g_.depth, s + t);
      for (; t < keys; ++t) s[t] = Dot(qi, k + t * g_.kt_key, g_.depth);
    } else {  // K^T's rows contiguous
      std::fill(s, s + keys, 0.0f);
      for (int64_t h = 0; h < g_.depth; ++h) Axpy(qi[h], k + h * g_.kt_depth, s, keys);
    }
    Probabilities(operands, row, s);
    Context(s, v + ValuesAt(row), g_.v_key, keys, g_.width, OutputAt(o, row));
  }

  // Rows `row` and `row` + 1, which read the same K (through its rows) and V: each load of them serves both.
  __attribute__((target("avx2,fma"))) void Rows(const float* q, const float* kt, const float* v, float* o,
                                                const std::vector<const float*>& operands, int64_t row,
                                                float* s) const {
    const int64_t keys = g_.keys;
    const float *q0 = QueryAt(q, row), *q1 = QueryAt(q, row + 1), *k = kt + KeysAt(row);
    float *s0 = s, *s1 = s + keys;
    int64_t t = 0;
    for (; t + 4 <= keys; t += 4) FourScoresTwoRows(q0, q1, k + t * g_.kt_key, g_.kt_key, g_.depth, s0 + t, s1 + t);
    for (; t < keys; ++t) s0[t] = Dot(q0, k + t * g_.kt_key, g_.depth), s1[t] = Dot(q1, k + t * g_.kt_key, g_.depth);
    Probabilities(operands, row, s0);
    Probabilities(operands, row + 1, s1);
    ContextTwoRows(s0, s1, v + ValuesAt(row), g_.v_key, keys, g_.width, OutputAt(o, row), OutputAt(o, row + 1));
  }

  // Row `row`'s scores through the chain's steps, the softmax and the NaN guard, in place.
  __attribute__((target("avx2,fma"))) void Probabilities(const std::vector<const float*>& operands, int64_t row,
                                                         float* s) const {
    const int64_t keys = g_.keys;
    for (size_t n = 0; n < steps_.size(); ++n) {
      const ScoreStep& step = steps_[n];
      if (step.kind == ScoreStep::Kind::kLinear) {
        LinearRow(s, keys, step.alpha, step.beta);
        continue;
      }
      CombineRow(step.kind, s, operands[n] + step.rows[row], step.key_stride, keys);
    }
    SoftmaxRow(s, keys);
    if (nan_to_)
      for (int64_t t = 0; t < keys; ++t) s[t] = std::isnan(s[t]) ? nan_value_ : s[t];
  }

  DecodeGeometry g_;
  std::vector<ScoreStep> steps_;
  bool nan_to_;
  float nan_value_;
  std::vector<int64_t> units_;  // the first score row of each unit of one or two rows, then the row count
};

// The element offset of each group (a multi-index over `lead`, every axis of the scores but the last two) in a tensor
// of `strides`, whose heads' axis (the last of `lead`) holds each head once for `repeat` heads of the scores (a
// grouped kv head's keys, never copied out per query head).
std::vector<int64_t> GroupOffsets(const Dims& lead, const Dims& strides, int64_t repeat) {
  int64_t groups = 1;
  for (int64_t d : lead) groups *= d;
  std::vector<int64_t> at(static_cast<size_t>(groups));
  for (int64_t group = 0; group < groups; ++group) {
    int64_t rest = group, offset = 0;
    for (size_t d = lead.size(); d-- > 0;) {
      int64_t index = rest % lead[d];
      rest /= lead[d];
      offset += (d + 1 == lead.size() ? index / repeat : index) * strides[d];
    }
    at[group] = offset;
  }
  return at;
}

}  // namespace

// The index of the one op that reads graph tensor `id` (OnlyReader), or 0 when none does, or others or the
// partition's outputs read it too.
size_t Builder::SoleReaderOf(int id) const {
  const BodyOp* reader = OnlyReader(id);
  return reader == nullptr ? 0 : static_cast<size_t>(reader - g_.ops().data());
}

// The index of the op that computes graph tensor `id`, or -1 (an input, a constant).
int Builder::ProducerOf(int id) const {
  const std::vector<BodyOp>& ops = g_.ops();
  for (size_t r = 0; r < ops.size(); ++r)
    if (ops[r].output == id) return static_cast<int>(r);
  return -1;
}

// Where `operand` [.., N, T, H] is a kv head's rows repeated for the N / kvN query heads that share it, as
// transformers writes it (expand_dims, broadcast_to, reshape of [.., kvN, T, H]) and nothing else reads the
// copies: the source, read with its heads' axis repeated (its ops added to `absorbed`); else `operand` itself.
Builder::DecodeChain::Operand Builder::RepeatedHeads(int operand, std::vector<size_t>* absorbed) const {
  const std::vector<BodyOp>& ops = g_.ops();
  const int reshape = ProducerOf(operand);
  if (reshape < 0 || ops[reshape].kernel != "relax.reshape" || OnlyReader(operand) == nullptr) return {operand, 1};
  const int broadcast = ProducerOf(ops[reshape].inputs[0]);
  if (broadcast < 0 || ops[broadcast].kernel != "relax.broadcast_to" || OnlyReader(ops[reshape].inputs[0]) == nullptr)
    return {operand, 1};
  const int expand = ProducerOf(ops[broadcast].inputs[0]);
  if (expand < 0 || ops[expand].kernel != "relax.expand_dims" || OnlyReader(ops[broadcast].inputs[0]) == nullptr)
    return {operand, 1};
  const int source = ops[expand].inputs[0];
  std::vector<int64_t> shape = g_.Shape(source);
  const size_t rank = shape.size();
  const std::vector<int64_t>& repeated = g_.Shape(ops[broadcast].output);
  if (rank < 3 || rank != g_.Shape(operand).size() || repeated.size() != rank + 1) return {operand, 1};
  const int64_t repeat = repeated[rank - 2];
  std::vector<int64_t> once = shape, copies = shape, merged = shape;
  once.insert(once.begin() + static_cast<std::ptrdiff_t>(rank - 2), 1);
  copies.insert(copies.begin() + static_cast<std::ptrdiff_t>(rank - 2), repeat);
  merged[rank - 3] *= repeat;
  if (g_.Shape(ops[expand].output) != once || repeated != copies || g_.Shape(operand) != merged ||
      DataType(g_.tensor(source)) != memory::data_type::f32)
    return {operand, 1};
  absorbed->insert(absorbed->end(), {static_cast<size_t>(expand), static_cast<size_t>(broadcast),
                                     static_cast<size_t>(reshape)});
  return {source, repeat};
}

// At the matmul k: Q K^T with at most kDecodeRows query rows per head, whose product only element-wise ops (a scalar
// scale or shift; an add, multiply or subtract of a float operand that broadcasts to it), reshapes that keep the
// keys' axis, a softmax over the keys, a NaN guard after it and a matmul by V read, one after the other. The chain's
// ops then compile to nothing (in_decode_attention_), and the second matmul, where every operand the chain reads
// has been computed, to one DecodeAttention step. So do the ops that only make K^T and V from the cache, where the
// kernel reads through them: K's transpose, a scalar scale of it (transformers scales Q and K^T by the fourth root
// of the head size each; the scale joins the scores' steps) and the repetition of grouped kv heads. Build runs this
// at every op before it compiles any (FindDecodeAttentions), since K's ops come before the scores' matmul.
void Builder::FindDecodeAttentions() {
  if (!CpuHasAvx2Fma()) return;
  for (size_t k = 0; k < g_.ops().size(); ++k) FindDecodeAttention(k);
}

bool Builder::FindDecodeAttention(size_t k) {
  const std::vector<BodyOp>& ops = g_.ops();
  if (ops[k].kernel != "relax.matmul" || ops[k].inputs.size() != 2) return false;
  const int q = ops[k].inputs[0], kt = ops[k].inputs[1];
  const std::vector<int64_t> product = g_.Shape(ops[k].output);
  const size_t rank = product.size();
  if (rank < 3 || product[rank - 2] > kDecodeRows || DataType(g_.tensor(ops[k].output)) != memory::data_type::f32 ||
      g_.Shape(q).size() != rank || g_.Shape(kt).size() != rank || DataType(g_.tensor(q)) != memory::data_type::f32 ||
      DataType(g_.tensor(kt)) != memory::data_type::f32)
    return false;
  for (size_t d = 0; d + 2 < rank; ++d)  // no broadcast between Q and K^T
    if (g_.Shape(q)[d] != product[d] || g_.Shape(kt)[d] != product[d]) return false;
  DecodeChain chain;
  chain.scores_matmul = k;
  std::vector<int64_t> view = product;  // the scores as the op reading them sees them
  int x = ops[k].output;
  bool softmaxed = false;
  while (true) {
    const size_t r = SoleReaderOf(x);
    if (r == 0) return false;
    const BodyOp& op = ops[r];
    const std::vector<int64_t>& out = g_.Shape(op.output);
    const bool reshape = op.kernel == "relax.reshape" || op.kernel == "relax.expand_dims" ||
                         op.kernel == "relax.squeeze" || op.kernel == "relax.flatten";
    if (reshape) {  // the scores' rows regrouped, the keys' axis kept
      if (op.inputs.empty() || op.inputs[0] != x || out.empty() || out.back() != view.back() ||
          g_.tensor(op.output).numel != g_.tensor(x).numel)
        return false;
      view = out;
    } else if (op.kernel == "relax.matmul" && softmaxed) {
      if (op.inputs.size() != 2 || op.inputs[0] != x || view != product) return false;
      chain.context_matmul = r;
      break;
    } else if (softmaxed) {
      if (op.kernel != "byoc.nan_to" || chain.nan_to) return false;
      chain.nan_to = true;
      chain.nan_value = static_cast<float>(Attrs(op.attrs, op.where).Float("value"));
    } else if (op.kernel == "relax.nn.softmax") {
      if (NormAxis(Attrs(op.attrs, op.where).Int("axis"), view.size(), op.where) != static_cast<int64_t>(view.size() - 1))
        return false;
      softmaxed = true;
    } else if (PostOp p; op.inputs.size() == 1 && EltwiseOf(op, &p)) {  // a scale spelled as one op (a byoc.eltwise)
      if (p.alg != algorithm::eltwise_linear) return false;
      DecodeChain::Step step;
      step.alpha = p.alpha, step.beta = p.beta;
      chain.steps.push_back(step);
    } else if (op.inputs.size() == 2 && out == view) {  // a scalar constant, or an operand broadcast to the scores
      bool x_first = false;
      const float c = ScalarOperand(op, x, &x_first);  // sets x_first, which LinearOf reads
      DecodeChain::Step step;
      step.view = view;
      if (LinearOf(op.kernel, c, x_first, &step.alpha, &step.beta)) {
        step.operand = -1;
      } else {
        step.operand = op.inputs[0] == x ? op.inputs[1] : op.inputs[0];
        const std::vector<int64_t>& shape = g_.Shape(step.operand);
        const bool commutes = op.kernel == "relax.add" || op.kernel == "relax.multiply";
        if (step.operand == x || (op.kernel != "relax.subtract" && !commutes) || (!commutes && op.inputs[0] != x) ||
            DataType(g_.tensor(step.operand)) != memory::data_type::f32 || !Broadcasts(shape, view) ||
            shape.size() > view.size())
          return false;
        step.kernel = op.kernel;
      }
      chain.steps.push_back(step);
    } else {
      return false;
    }
    chain.ops.push_back(r);
    x = op.output;
  }
  const int v = ops[chain.context_matmul].inputs[1];
  const std::vector<int64_t>& vs = g_.Shape(v);
  if (vs.size() != rank || DataType(g_.tensor(v)) != memory::data_type::f32 || vs[rank - 2] != product[rank - 1])
    return false;
  for (size_t d = 0; d + 2 < rank; ++d)
    if (vs[d] != product[d]) return false;
  // What makes K^T and V, read through: K^T = scale * K transposed, K and V repeated per query head
  std::vector<size_t> absorbed = {k};
  chain.keys = {kt, 1};
  int made = ProducerOf(kt), scaled = kt;
  if (made >= 0 && OnlyReader(kt) != nullptr && ops[made].inputs.size() == 2) {
    for (int y : ops[made].inputs) {
      bool y_first = false;
      const float c = ScalarOperand(ops[made], y, &y_first);  // sets y_first, which LinearOf reads
      DecodeChain::Step scale;
      if (g_.Shape(y) == g_.Shape(kt) && LinearOf(ops[made].kernel, c, y_first, &scale.alpha, &scale.beta) &&
          scale.beta == 0.0f) {
        chain.steps.insert(chain.steps.begin(), scale);
        absorbed.push_back(static_cast<size_t>(made));
        scaled = y;
        break;
      }
    }
  }
  chain.keys = {scaled, 1};
  const int transpose = ProducerOf(scaled);
  if (transpose >= 0 && ops[transpose].kernel == "relax.permute_dims" && OnlyReader(scaled) != nullptr) {
    std::vector<int64_t> perm = Permutation(ops[transpose], Attrs(ops[transpose].attrs, ops[transpose].where)), swap(rank);
    for (size_t d = 0; d < rank; ++d) swap[d] = static_cast<int64_t>(d);
    std::swap(swap[rank - 1], swap[rank - 2]);
    if (perm == swap && DataType(g_.tensor(ops[transpose].inputs[0])) == memory::data_type::f32) {
      absorbed.push_back(static_cast<size_t>(transpose));
      chain.keys_by_row = true;
      chain.keys = RepeatedHeads(ops[transpose].inputs[0], &absorbed);
    }
  }
  chain.values = RepeatedHeads(v, &absorbed);
  in_decode_attention_.insert(absorbed.begin(), absorbed.end());
  in_decode_attention_.insert(chain.ops.begin(), chain.ops.end());
  deferred_decode_[chain.context_matmul] = std::move(chain);
  return true;
}

// The chain FindDecodeAttention found, at its context matmul j: one DecodeAttention step reading Q, K^T and V
// in the layouts they were computed in where their rows are contiguous (K^T's either way), each operand of the
// scores plain, and writing the output plain, or through the strides that make a transpose after it plain.
void Builder::DecodeAttentionStep(size_t j) {
  const std::vector<BodyOp>& ops = g_.ops();
  const DecodeChain& chain = deferred_decode_.at(j);
  const BodyOp& first = ops[chain.scores_matmul];
  const int q = first.inputs[0], kt = chain.keys.tensor, v = chain.values.tensor, o = ops[j].output;
  auto rows_contiguous = [&](int id) {  // the layout computed, where its last axis is contiguous; else plain
    const Desc& desc = values_.DescOf(id);
    return IsStrided(desc) && desc.get_strides().back() == 1 ? desc : Plain(g_.Shape(id));
  };
  Desc q_desc = rows_contiguous(q), v_desc = rows_contiguous(v);
  Desc kt_desc = chain.keys_by_row ? rows_contiguous(kt) : values_.DescOf(kt);
  const size_t rank = g_.Shape(first.output).size();
  if (!chain.keys_by_row && (!IsStrided(kt_desc) || (kt_desc.get_strides()[rank - 1] != 1 &&
                                                     kt_desc.get_strides()[rank - 2] != 1)))
    kt_desc = Plain(g_.Shape(kt));
  Desc o_desc = TransposedDst(o, DimsOf(g_.Shape(o)));
  if (o_desc.get_strides().back() != 1) o_desc = Plain(g_.Shape(o));
  const Dims product = DimsOf(g_.Shape(first.output));
  const Dims lead(product.begin(), product.end() - 2);
  DecodeGeometry geometry;
  geometry.rows = product[rank - 2];
  geometry.keys = product[rank - 1];
  geometry.depth = g_.Shape(q)[rank - 1];
  geometry.width = g_.Shape(v)[rank - 1];
  geometry.groups = 1;
  for (int64_t d : lead) geometry.groups *= d;
  geometry.q_at = GroupOffsets(lead, q_desc.get_strides(), 1);
  geometry.kt_at = GroupOffsets(lead, kt_desc.get_strides(), chain.keys.repeat);
  geometry.v_at = GroupOffsets(lead, v_desc.get_strides(), chain.values.repeat);
  geometry.o_at = GroupOffsets(lead, o_desc.get_strides(), 1);
  geometry.q_row = q_desc.get_strides()[rank - 2];
  // K^T's strides: K's rows' transposed when the kernel reads K itself
  geometry.kt_depth = kt_desc.get_strides()[chain.keys_by_row ? rank - 1 : rank - 2];
  geometry.kt_key = kt_desc.get_strides()[chain.keys_by_row ? rank - 2 : rank - 1];
  geometry.v_key = v_desc.get_strides()[rank - 2];
  geometry.o_row = o_desc.get_strides()[rank - 2];
  std::vector<Arg> args = {{DNNL_ARG_SRC, As(q, q_desc), q_desc},
                           {DNNL_ARG_WEIGHTS, As(kt, kt_desc), kt_desc},
                           {DNNL_ARG_SRC_1, As(v, v_desc), v_desc},
                           {DNNL_ARG_DST, Define(o, o_desc), o_desc}};
  std::vector<ScoreStep> steps;
  const int64_t score_rows = geometry.groups * geometry.rows;
  for (size_t i = 0; i < chain.steps.size(); ++i) {
    const DecodeChain::Step& c = chain.steps[i];
    ScoreStep step;
    if (c.operand < 0) {
      step.alpha = c.alpha, step.beta = c.beta;
      steps.push_back(step);
      continue;
    }
    step.kind = c.kernel == "relax.add"        ? ScoreStep::Kind::kAdd
                : c.kernel == "relax.multiply" ? ScoreStep::Kind::kMultiply
                                               : ScoreStep::Kind::kSubtract;
    const std::vector<int64_t>& shape = g_.Shape(c.operand);
    const std::vector<int64_t> strides = BroadcastStrides(shape, c.view);
    step.key_stride = strides.back();
    step.rows.resize(static_cast<size_t>(score_rows));
    for (int64_t row = 0; row < score_rows; ++row) step.rows[row] = RowOffset(row, c.view, strides);
    const Desc plain = Plain(shape);
    args.push_back({DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), As(c.operand, plain), plain});
    steps.push_back(std::move(step));
  }
  AddStep(dnnl::primitive(), std::move(args), Desc(),
          std::make_shared<DecodeAttention>(std::move(geometry), std::move(steps), chain.nan_to, chain.nan_value));
}

}  // namespace dnnl_runtime
}  // namespace byoc
