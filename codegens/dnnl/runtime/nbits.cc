// nbits.cc -- weight-only int4/int8 matmuls (onnxruntime's MatMulNBits, codegens/dnnl/nbits.py) on the packed
// weight: a GEMV for a few rows, a GEMM on B^T dequantized a panel at a time for more (the loops: nbits.h).
#include <algorithm>
#include <vector>

#include "builder.h"
#include "kernels.h"
#include "nbits.h"

namespace byoc {
namespace dnnl_runtime {
namespace {

constexpr int kZeroPoints = DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_WEIGHTS;
constexpr int kScales = DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS;
// Up to this many rows, each row is a GEMV on the packed weight; above, a GEMM dequantizes the weight a panel at
// a time, which pays for the panel once for all rows.
constexpr int64_t kGemvRows = 3;
// Rows of B^T (columns of y) per unit of work, and codes of K per chunk (AVX2: each 16 columns' 256 x 16 floats,
// in L1, against a chunk of x's strips, in L2).
constexpr int64_t kPanel = 256, kDepth = 256;

// The columns of a unit of a GEMM's work: kPanel, halved (down to 64) while the panels would not share out evenly
// between the team (BERT's 768 columns were 3 panels on 2 threads: one thread did two, the other waited).
int64_t PanelWidth(int64_t n, int64_t threads) {
  int64_t width = kPanel;
  while (width > 64) {
    const int64_t panels = (n + width - 1) / width;
    if (panels % threads == 0 || panels >= 4 * threads) break;
    width /= 2;
  }
  return width;
}
// Rows of B^T per chunk of a GEMV's work (64 rows: 128 kB of int4 codes at K = 4096).
constexpr int64_t kGemvChunk = 64;

// The calling thread's buffers for a call's rows of x (padded, quantized), kept from call to call: a decoder's
// token runs a dozen of these kernels, and fresh vectors cost each call several trips to malloc. A call fills them
// and its parallel region only reads them.
struct RowScratch {
  std::vector<float> padded, scales, sums;
  std::vector<int8_t> q;
  std::vector<int32_t> lane_sums;
  std::vector<nbits::QuantizedRow> rows;
};

RowScratch& Scratch() {
  thread_local RowScratch scratch;
  return scratch;
}

class MatmulNBitsKernel : public Kernel {
 public:
  MatmulNBitsKernel(nbits::Geometry g, int64_t rows, int zero_kind, float zero_point, bool bias, bool int8)
      : g_(g), rows_(rows), zero_kind_(zero_kind), zero_point_(zero_point), bias_(bias), int8_(int8),
        vnni_dots_(CpuHasAvx512Vnni() && OnednnRuns(dnnl::cpu_isa::avx512_core_vnni) && nbits::VnniBlocks(g)),
        dot_(nbits::ChooseDot()), dot_int8_(nbits::ChooseDotInt8(vnni_dots_)), avx2_(CpuHasAvx2Fma()) {}
  const char* Name() const override {
    return rows_ <= kGemvRows ? "matmul_nbits_gemv" : IntegerGemm() ? "matmul_nbits_gemm_int8" : "matmul_nbits_gemm";
  }

  void Run(const std::unordered_map<int, memory>& args) const override {
    const float* x = Data<const float>(args, DNNL_ARG_SRC);
    const uint8_t* packed = Data<const uint8_t>(args, DNNL_ARG_WEIGHTS);
    const float* scales = Data<const float>(args, kScales);
    nbits::Zeros zeros;
    zeros.uniform = zero_point_;
    if (zero_kind_ == 1) zeros.bytes = Data<const uint8_t>(args, kZeroPoints);
    if (zero_kind_ == 2) zeros.floats = Data<const float>(args, kZeroPoints);
    const float* bias = bias_ ? Data<const float>(args, DNNL_ARG_BIAS) : nullptr;
    float* y = Data<float>(args, DNNL_ARG_DST);
    if (int8_ && (rows_ <= kGemvRows || IntegerGemm())) {
      // accuracy_level 4 with integer dots: a GEMV's rows, or on VNNI any number of rows (each chunk of B^T's rows
      // stays in the core's caches while every row of x meets it)
      DotsInt8(x, packed, scales, zeros, bias, y);
    } else if (rows_ <= kGemvRows) {
      Gemv(x, packed, scales, zeros, bias, y);
    } else if (int8_) {
      // accuracy_level 4 on many rows: x's int8 quantization, dequantized, into the float GEMM (the products
      // onnxruntime's int8 GEMM sums, in float)
      std::vector<float> xq(static_cast<size_t>(rows_ * g_.k));
      nbits::FakeQuantizeRows(g_, x, rows_, xq.data());
      Gemm(xq.data(), packed, scales, zeros, bias, y);
    } else {
      Gemm(x, packed, scales, zeros, bias, y);
    }
  }

 private:
  // Whether many rows at accuracy_level 4 are integer dots too (VNNI, and blocks its dots take).
  bool IntegerGemm() const { return int8_ && vnni_dots_; }

  // How DotsInt8 quantizes a row: for the VNNI dots (their order of 4-bit codes' q), else for AVX2's or plain C++'s.
  decltype(&nbits::QuantizeRow) Quantizer() const {
    if (vnni_dots_) return nbits::QuantizeRowVnni;
    return avx2_ ? nbits::QuantizeRowAvx2 : nbits::QuantizeRow;
  }

  // Row m of x, padded to whole blocks: the last block's codes past K meet zeros (`copy` holds it when K is not).
  const float* PaddedRow(const float* x, int64_t m, std::vector<float>* copy) const {
    const float* row = x + m * g_.k;
    if (g_.padded_k() == g_.k) return row;
    copy->assign(static_cast<size_t>(g_.padded_k()), 0.0f);
    std::copy(row, row + g_.k, copy->begin());
    return copy->data();
  }

  void Gemv(const float* x, const uint8_t* packed, const float* scales, const nbits::Zeros& zeros, const float* bias,
            float* y) const {
    RowScratch& scratch = Scratch();
    std::vector<float>& sums = scratch.sums;
    sums.resize(static_cast<size_t>(g_.blocks));
    for (int64_t m = 0; m < rows_; ++m) {
      const float* row = PaddedRow(x, m, &scratch.padded);
      float* out = y + m * g_.n;
      // Chunks of rows of B^T taken as threads come free (a thread the machine slows down takes fewer).
      const int64_t chunks = (g_.n + kGemvChunk - 1) / kGemvChunk;
      nbits::BlockSums(g_, row, sums.data());
#pragma omp parallel for schedule(dynamic, 1)
      for (int64_t c = 0; c < chunks; ++c)
        dot_(g_, packed, scales, zeros, bias, row, sums.data(), out, c * kGemvChunk, std::min(g_.n, (c + 1) * kGemvChunk));
    }
  }

  // accuracy_level 4: each row of x quantized to int8 per block once (nbits.h's QuantizeRow), then per chunk of B^T's
  // rows, taken as threads come free, every row's integer block sums.
  void DotsInt8(const float* x, const uint8_t* packed, const float* scales, const nbits::Zeros& zeros, const float* bias,
                float* y) const {
    const int64_t padded = g_.padded_k();
    RowScratch& scratch = Scratch();
    scratch.q.resize(static_cast<size_t>(rows_ * padded));
    scratch.scales.resize(static_cast<size_t>(rows_ * g_.blocks));
    scratch.sums.resize(scratch.scales.size());
    const auto quantize = Quantizer();
    // the VNNI dots of 4-bit codes fold a uniform zero point in with each group's lane sums of q
    const int64_t groups = vnni_dots_ && g_.bits == 4 ? (padded + nbits::kVnniGroup - 1) / nbits::kVnniGroup : 0;
    scratch.lane_sums.resize(static_cast<size_t>(rows_ * groups * 16));
    std::vector<nbits::QuantizedRow>& xq = scratch.rows;
    xq.clear();
    for (int64_t m = 0; m < rows_; ++m) {
      int8_t* qm = scratch.q.data() + m * padded;
      float *scale_m = scratch.scales.data() + m * g_.blocks, *sum_m = scratch.sums.data() + m * g_.blocks;
      quantize(g_, PaddedRow(x, m, &scratch.padded), qm, scale_m, sum_m);
      int32_t* lane_sums_m = groups ? scratch.lane_sums.data() + m * groups * 16 : nullptr;
      if (lane_sums_m) nbits::GroupLaneSums(g_, qm, lane_sums_m);
      xq.push_back({qm, scale_m, sum_m, lane_sums_m});
    }
    const bool gemm = rows_ > kGemvRows;  // on VNNI (Run): the codes unpacked once per chunk
    const int64_t chunks = (g_.n + kGemvChunk - 1) / kGemvChunk;
#pragma omp parallel
    {
      std::vector<uint8_t> unpacked;
#pragma omp for schedule(dynamic, 1)
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t n0 = c * kGemvChunk, n1 = std::min(g_.n, n0 + kGemvChunk);
        if (gemm) {
          nbits::GemmInt8Vnni(g_, packed, scales, zeros, bias, xq.data(), rows_, y, n0, n1, &unpacked);
          continue;
        }
        for (int64_t m = 0; m < rows_; ++m) dot_int8_(g_, packed, scales, zeros, bias, xq[m], y + m * g_.n, n0, n1);
      }
    }
  }

  void Gemm(const float* x, const uint8_t* packed, const float* scales, const nbits::Zeros& zeros, const float* bias,
            float* y) const {
    const int64_t width = PanelWidth(g_.n, omp_get_max_threads());
    const int64_t panels = (g_.n + width - 1) / width;
    // K in chunks of whole blocks, about kDepth codes (a chunk of x and of a panel stay in the core's caches),
    // the chunks' products summed into y.
    const int64_t chunk_blocks = std::max<int64_t>(1, kDepth / g_.block), ld = chunk_blocks * g_.block;
    // One parallel region: each thread computes the panels it takes on its own (AVX2: nbits.h's microkernel
    // on B^T dequantized 16 columns at a time; else dequantized panels and oneDNN's sgemm, which inside the
    // region runs on the calling thread). A team-wide step per panel meets at a barrier, and on a shared
    // machine a barrier waits for the thread the scheduler took away (GEMM [64,2048]x[2048,2048] on 2
    // threads: 31 ms that way, 8 ms on 1); panels are taken as threads come free, so a slowed thread takes fewer.
    const int64_t strips = (rows_ + nbits::kMr - 1) / nbits::kMr;
#pragma omp parallel
    {
      // x packed in 6-row strips once per call by each thread for itself (AVX2; 512 kB at [64, 2048]): packed
      // once by the team it would wait at a barrier, packed per panel it cost as much as the products
      // (1.1-1.25x onnxruntime on one thread, 1.04x packed once)
      std::vector<float> ap;
      bool packed_x = false;
      std::vector<float> w, bp, tile;
      if (avx2_) {
        bp.resize(static_cast<size_t>(ld * nbits::kNr));
        tile.resize(static_cast<size_t>(rows_ * nbits::kNr));
      } else {
        w.resize(static_cast<size_t>(std::min(width, g_.n) * ld));
      }
#pragma omp for schedule(dynamic, 1) nowait
      for (int64_t q = 0; q < panels; ++q) {
        const int64_t n0 = q * width, n1 = std::min(g_.n, n0 + width);
        if (avx2_) {
          if (!packed_x) {
            ap.resize(static_cast<size_t>(strips * nbits::kMr * g_.k));
            nbits::PackRows(g_, x, rows_, 0, strips * nbits::kMr, ap.data());
            packed_x = true;
          }
          nbits::GemmAvx2(g_, packed, scales, zeros, ap.data(), rows_, y, n0, n1, chunk_blocks, bp.data(),
                          tile.data());
        } else {
          for (int64_t b0 = 0; b0 < g_.blocks; b0 += chunk_blocks) {
            const int64_t b1 = std::min(g_.blocks, b0 + chunk_blocks), k0 = b0 * g_.block;
            const int64_t depth = std::min(g_.k, b1 * g_.block) - k0;
            nbits::DequantizeScalar(g_, packed, scales, zeros, w.data(), ld, n0, n1, b0, b1);
            dnnl_sgemm('N', 'T', rows_, n1 - n0, depth, 1.0f, x + k0, g_.k, w.data(), ld, b0 == 0 ? 0.0f : 1.0f,
                       y + n0, g_.n);
          }
        }
        if (bias) {
          for (int64_t m = 0; m < rows_; ++m)
            for (int64_t n = n0; n < n1; ++n) y[m * g_.n + n] += bias[n];
        }
      }
    }
  }

  nbits::Geometry g_;
  int64_t rows_;
  int zero_kind_;  // 0 one value, 1 a byte per block, 2 a float per block
  float zero_point_;
  bool bias_;
  bool int8_;  // accuracy_level 4: int8 activations (onnxruntime's CompInt8)
  bool vnni_dots_;  // AVX-512 VNNI here, oneDNN allowed it, and its dots take g_'s blocks
  nbits::DotRows dot_;
  nbits::DotInt8Fn dot_int8_;
  bool avx2_;
};

}  // namespace

// x [..., K] times the packed weight (inputs: x, B's bytes, scales, [zero points], [bias]; codegens/dnnl/nbits.py).
void Builder::MatmulNBits(const BodyOp& op, const Attrs& a) {
  nbits::Geometry g{a.Int("k"), a.Int("n"), a.Int("bits"), a.Int("block_size"), 0};
  if ((g.bits != 4 && g.bits != 8) || g.block < 16 || (g.block & (g.block - 1)) || g.k <= 0 || g.n <= 0)
    Fail(op.where + ": bits " + std::to_string(g.bits) + ", block " + std::to_string(g.block) + " (4 or 8 bits, "
         "blocks a power of 2 >= 16)");
  g.blocks = (g.k + g.block - 1) / g.block;
  std::string kind = a.Str("zero_points");
  int zero_kind = kind == "uniform" ? 0 : kind == "u8" ? 1 : kind == "f32" ? 2 : -1;
  if (zero_kind < 0) Fail(op.where + ": zero points \"" + kind + "\" (uniform, u8 or f32)");
  bool bias = a.Bool("bias");
  Arity(op, 3 + (zero_kind != 0) + bias);
  const std::vector<int64_t>& xs = g_.Shape(op.inputs[0]);
  const std::vector<int64_t>& ys = g_.Shape(op.output);
  if (xs.empty() || xs.back() != g.k || ys.empty() || ys.back() != g.n)
    Fail(op.where + ": " + ShapeStr(xs) + " x [" + std::to_string(g.k) + ", " + std::to_string(g.n) + "] is not " +
         ShapeStr(ys));
  auto bytes_of = [&](int id) { return static_cast<int64_t>(g_.tensor(id).numel) * 4; };
  int64_t packed_bytes = g.n * g.blocks * g.block * g.bits / 8;
  if (bytes_of(op.inputs[1]) < packed_bytes || g_.tensor(op.inputs[2]).numel != g.n * g.blocks)
    Fail(op.where + ": the packed weight or the scales do not have the size of [N, blocks, block]");
  int64_t rows = g_.tensor(op.inputs[0]).numel / g.k;
  auto constant = [&](int id) {
    int v = values_.of(id);
    return Arg{0, v, values_[v].desc};
  };
  std::vector<Arg> args;
  args.push_back({DNNL_ARG_SRC, As(op.inputs[0], Plain(xs)), Plain(xs)});
  Arg w = constant(op.inputs[1]);
  w.key = DNNL_ARG_WEIGHTS;
  args.push_back(w);
  Arg s = constant(op.inputs[2]);
  s.key = kScales;
  args.push_back(s);
  size_t next = 3;
  if (zero_kind != 0) {
    int64_t need = zero_kind == 1 ? g.n * g.blocks : g.n * g.blocks * 4;
    if (bytes_of(op.inputs[next]) < need) Fail(op.where + ": the zero points are not one per block");
    Arg z = constant(op.inputs[next++]);
    z.key = kZeroPoints;
    args.push_back(z);
  }
  if (bias) {
    if (g_.tensor(op.inputs[next]).numel != g.n) Fail(op.where + ": the bias is not [N]");
    args.push_back({DNNL_ARG_BIAS, As(op.inputs[next], Plain({g.n})), Plain({g.n})});
  }
  int dst = Define(op.output, Plain(ys));
  args.push_back({DNNL_ARG_DST, dst, Plain(ys)});
  float zero_point = zero_kind == 0 ? static_cast<float>(a.Float("zero_point")) : 0.0f;
  // MatMulNBits' accuracy_level (absent in artifacts built before it was passed): 4 computes with x quantized
  // to int8 per block, as onnxruntime does; 0-3 in float32
  const int64_t accuracy = a.Has("accuracy_level") ? a.Int("accuracy_level") : 0;
  AddStep(dnnl::primitive(), std::move(args), Desc(),
          std::make_shared<MatmulNBitsKernel>(g, rows, zero_kind, zero_point, bias, accuracy == 4));
}

}  // namespace dnnl_runtime
}  // namespace byoc
