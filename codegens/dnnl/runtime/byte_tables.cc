// byte_tables.cc -- 8-bit element-wise units run as 256-entry byte tables, composed and chained.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "builder.h"
#include "kernels.h"

namespace byoc {
namespace dnnl_runtime {

// The 256 bytes x + 0 with post-ops `f` writes for the 256 bytes of `src`'s type, when its output depends on
// each element of its source alone, else empty. That is so when each post-op is element-wise or reads a
// tensor of `operands`: what that tensor holds for each of the 256 source codes (the source itself, a byte
// table of it, or either dequantized; SiLU's x * sigmoid(x) reads x twice). src and dst must be dense 8-bit
// layouts of one order (a byte's position is its element's in both, and no padding must stay zero).
std::vector<uint8_t> Builder::LookupTableOf(const Fused& f, const Desc& src, const Desc& dst,
                                            const std::map<int, memory>& operands) const {
  int64_t numel = 1;
  for (int64_t d : src.get_dims()) numel *= d;
  if (src.get_size() != static_cast<size_t>(numel) || dst.get_size() != static_cast<size_t>(numel) ||
      src.get_strides() != dst.get_strides() || !src.get_inner_blks().empty() || !dst.get_inner_blks().empty())
    return {};
  Desc bytes_out(Dims{256}, dst.get_data_type(), memory::format_tag::a);
  memory out(bytes_out, Engine());
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC_0, SourceCodes(src.get_data_type())}, {DNNL_ARG_DST, out}};
  post_ops ops;
  for (size_t i = 0; i < f.post.size(); ++i) {
    const PostOp& p = f.post[i];
    auto operand = operands.find(p.tensor);
    if (p.tensor < 0) {
      ops.append_eltwise(p.alg, p.alpha, p.beta);
    } else if (operand != operands.end()) {
      ops.append_binary(p.alg, operand->second.get_desc());
      args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1] = operand->second;
    } else {
      return {};
    }
  }
  Desc zero_desc(Dims{1}, memory::data_type::f32, memory::format_tag::a);
  memory zero(zero_desc, Engine());
  *static_cast<float*>(zero.get_data_handle()) = 0.0f;
  args[DNNL_ARG_SRC_1] = zero;
  primitive_attr attr;
  attr.set_post_ops(ops);
  dnnl::stream stream(Engine());
  dnnl::binary(dnnl::binary::primitive_desc(Engine(), algorithm::binary_add, args.at(DNNL_ARG_SRC_0).get_desc(),
                                            zero_desc, bytes_out, attr))
      .execute(stream, args);
  stream.wait();
  const auto* table = static_cast<const uint8_t*>(out.get_data_handle());
  return std::vector<uint8_t>(table, table + 256);
}

// The 256 codes of an 8-bit type, in byte order (an s8 byte b is the code int8_t(b)).
memory Builder::SourceCodes(memory::data_type type) {
  memory codes(Desc(Dims{256}, type, memory::format_tag::a), Engine());
  auto* bytes = static_cast<uint8_t*>(codes.get_data_handle());
  for (int b = 0; b < 256; ++b) bytes[b] = static_cast<uint8_t>(b);
  return codes;
}

// What graph tensor `id` (8-bit) holds for each of the 256 codes of `source`, when it is `source` itself or a
// byte table of it (its table, seen as id's type); a null memory otherwise.
memory Builder::BytesOf(int id, int source) const {
  memory::data_type type = DataType(g_.tensor(id));
  if (id == source) return SourceCodes(type);
  auto table = byte_tables_.find(id);
  if (table == byte_tables_.end() || table->second.source != source) return memory();
  memory bytes(Desc(Dims{256}, type, memory::format_tag::a), Engine());
  std::copy(table->second.table.begin(), table->second.table.end(), static_cast<uint8_t*>(bytes.get_data_handle()));
  return bytes;
}

// The byte tables the post-ops of `f` read, as they are or through one of the leading dequantizations
// `dqs` (their composition is in the new table), are not computed when nothing else reads them.
void Builder::DropComposedTables(const Fused& f, const std::vector<size_t>& dqs) {
  const std::vector<BodyOp>& ops = g_.ops();
  for (const PostOp& p : f.post) {
    if (p.tensor < 0) continue;
    int read = p.tensor;
    for (size_t i : dqs)
      if (ops[i].output == p.tensor) read = ops[i].inputs[0];
    TakeLastTable(read);
  }
}

// Graph tensor `id`'s byte table, taken out of the program (its step, its buffer) when nothing else reads
// `id` and its step is the last one (a later step's reads are fixed); nullopt, changing nothing, otherwise.
std::optional<ByteTable> Builder::TakeLastTable(int id) {
  auto table = byte_tables_.find(id);
  if (table == byte_tables_.end() || g_.uses(id) != 1 || table->second.step + 1 != plan_.size())
    return std::nullopt;
  ByteTable taken = std::move(table->second);
  byte_tables_.erase(table);
  plan_.DropLast(values_.of(id));
  values_.Bind(id, -1);
  return taken;
}

// byoc.byte_table: an 8-bit element-wise unit whose 256-entry table the codegen computed from the unit's ONNX
// definition (codegens/dnnl/quantized.py: dequantize, element-wise float ops oneDNN may not have, such as Erf,
// quantize). The source is read in a dense plain layout; a source that is itself a byte table read by nothing
// else is composed into this one.
void Builder::ByteTableOp(const BodyOp& op, const Attrs& a) {
  Arity(op, 1);
  SameShape(op, op.inputs[0]);
  std::vector<int64_t> entries = a.Ints("table");
  if (entries.size() != 256) Fail(op.where + ": a byte table of " + std::to_string(entries.size()) + " entries, not 256");
  std::vector<uint8_t> table(256);
  for (int b = 0; b < 256; ++b) table[b] = static_cast<uint8_t>(entries[b] & 0xff);
  int source = op.inputs[0];
  if (std::optional<ByteTable> upstream = TakeLastTable(source)) {
    std::vector<uint8_t> composed(256);
    for (int b = 0; b < 256; ++b) composed[b] = table[upstream->table[b]];
    table = std::move(composed);
    source = upstream->source;
  }
  const std::vector<int64_t>& shape = g_.Shape(source);
  Desc src = Plain(shape, DataType(g_.tensor(source)));
  Desc dst = Plain(shape, DataType(g_.tensor(op.output)));
  int from = As(source, src);
  int64_t count = static_cast<int64_t>(src.get_size());
  byte_tables_[op.output] = {source, table, plan_.size()};
  AddStep(dnnl::primitive(), {{DNNL_ARG_SRC, from, src}, {DNNL_ARG_DST, Define(op.output, dst), dst}}, Desc(),
          std::make_shared<LookupTable>(std::move(table), count));
}

}  // namespace dnnl_runtime
}  // namespace byoc
