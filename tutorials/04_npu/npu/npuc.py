"""npuc: the NPU's compiler, a program of its own (``python npuc.py partitions.json -o partitions.c``).

It reads the partitions npu's codegen describes and writes C for them: each op a loop nest over static shapes,
each partition the entry point byoc_abi.h declares (inputs then outputs, each checked with byoc_arg). The C
reads the weights (``--floats`` of them, float32 little-endian, at the offsets the description gives) from the
blob ``npu_weights`` that the codegen hands byoc, converted once on a big-endian machine. Everything the ops
touch is in the NPU's memory (npu_alloc, npu_write, npu_read): the weights, copied there once; each input, copied
in unless an earlier partition left it in a slot; each output, copied out unless only the NPU reads it.
"""

import argparse
import json
import math


def size(shape) -> int:
    return math.prod(shape)


def strides(shape) -> list:
    return [math.prod(shape[d + 1:]) for d in range(len(shape))]


def conv2d(out, x, w, ys, xs, ws, a) -> str:
    (n, o, oh, ow), (_, c, h, wd), (_, cg, kh, kw) = ys, xs, ws
    (sh, sw), (dh, dw), (pt, pl) = a["strides"], a["dilation"], a["padding"][:2]
    og = o // a["groups"]
    return f"""  for (int b = 0; b < {n}; ++b) for (int k = 0; k < {o}; ++k) for (int i = 0; i < {oh}; ++i)
  for (int j = 0; j < {ow}; ++j) {{
    float s = 0.0f;
    for (int q = 0; q < {cg}; ++q) for (int u = 0; u < {kh}; ++u) for (int v = 0; v < {kw}; ++v) {{
      int r = i * {sh} + u * {dh} - {pt}, t = j * {sw} + v * {dw} - {pl}, ch = k / {og} * {cg} + q;
      if (r >= 0 && r < {h} && t >= 0 && t < {wd})
        s += {x}[((b * {c} + ch) * {h} + r) * {wd} + t] * {w}[((k * {cg} + q) * {kh} + u) * {kw} + v];
    }}
    {out}[((b * {o} + k) * {oh} + i) * {ow} + j] = s;
  }}"""


def max_pool2d(out, x, ys, xs, a) -> str:
    (n, c, oh, ow), (_, _, h, wd) = ys, xs
    (kh, kw), (sh, sw), (pt, pl) = a["pool_size"], a["strides"], a["padding"][:2]
    return f"""  for (int p = 0; p < {n * c}; ++p) for (int i = 0; i < {oh}; ++i) for (int j = 0; j < {ow}; ++j) {{
    float m = -INFINITY;
    for (int u = 0; u < {kh}; ++u) for (int v = 0; v < {kw}; ++v) {{
      int r = i * {sh} + u - {pt}, t = j * {sw} + v - {pl};
      if (r >= 0 && r < {h} && t >= 0 && t < {wd} && {x}[(p * {h} + r) * {wd} + t] > m) m = {x}[(p * {h} + r) * {wd} + t];
    }}
    {out}[(p * {oh} + i) * {ow} + j] = m;
  }}"""


def add(out, a, b, ys, as_, bs) -> str:
    """Numpy broadcasting: each operand's offset from the output index, its broadcast dims' strides 0."""
    def offset(shape):
        pad = [1] * (len(ys) - len(shape)) + list(shape)
        terms = [f"(i / {strides(ys)[d]} % {ys[d]}) * {strides(pad)[d]}" for d in range(len(ys)) if pad[d] != 1]
        return " + ".join(terms) or "0"
    return f"  for (int i = 0; i < {size(ys)}; ++i) {out}[i] = {a}[{offset(as_)}] + {b}[{offset(bs)}];"


def matmul(out, a, b, ys, as_) -> str:
    (m, n), k = ys, as_[1]
    return f"""  for (int i = 0; i < {m}; ++i) for (int j = 0; j < {n}; ++j) {{
    float s = 0.0f;
    for (int q = 0; q < {k}; ++q) s += {a}[i * {k} + q] * {b}[q * {n} + j];
    {out}[i * {n} + j] = s;
  }}"""


def op_code(op, name, shapes) -> str:
    ins, out, a = [name[t] for t in op["inputs"]], name[op["output"]], op["attrs"]
    ys, xs = shapes[str(op["output"])], [shapes[str(t)] for t in op["inputs"]]
    kind = op["op"]
    if kind == "relax.nn.conv2d":
        return conv2d(out, ins[0], ins[1], ys, xs[0], xs[1], a)
    if kind == "relax.nn.max_pool2d":
        return max_pool2d(out, ins[0], ys, xs[0], a)
    if kind == "relax.add":
        return add(out, ins[0], ins[1], ys, xs[0], xs[1])
    if kind == "relax.matmul":
        return matmul(out, ins[0], ins[1], ys, xs[0])
    if kind == "relax.nn.relu":
        return f"  for (int i = 0; i < {size(ys)}; ++i) {out}[i] = {ins[0]}[i] > 0.0f ? {ins[0]}[i] : 0.0f;"
    raise SystemExit(f"npuc: no kernel for {kind}")


WEIGHTS = """extern const unsigned char npu_weights[];
static const float* npu_blob(void) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  static float* words;
  if (words == NULL) {
    words = (float*)malloc(%d * sizeof(float));
    for (long i = 0; i < %d; ++i) {
      const unsigned char* b = npu_weights + 4 * i;
      uint32_t u = b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
      memcpy(words + i, &u, 4);
    }
  }
  return words;
#else
  return (const float*)npu_weights;
#endif
}

static const float* npu_weights_on_npu(void) {
  static float* on_npu;
  if (on_npu == NULL) {
    on_npu = (float*)npu_alloc(%d * sizeof(float) + 1);
    npu_write(on_npu, npu_blob(), %d * sizeof(float));
  }
  return on_npu;
}"""


def slot(name: str) -> str:
    return "npu_slot_" + name.replace(":", "_")


def partition_code(p) -> str:
    shapes, sym, on_npu = p["shapes"], p["symbol"], p["on_npu"]
    name = {int(t): f"(npu_weights_on_npu() + {offset})" for t, offset in p["constants"].items()}
    args = p["inputs"] + p["outputs"]
    lines = [f'static const char {sym}_name[] = "{sym}";', '#ifdef __cplusplus\nextern "C"\n#endif',
              f"int __tvm_ffi_{sym}(void* self, const byoc_any* args, int32_t num_args, byoc_any* result) {{",
              "  int error = 0;", "  (void)self; (void)result;",
              f'  if (num_args != {len(args)}) return byoc_fail("TypeError", {sym}_name, "wrong argument count");']
    freed, after = [], []
    for k, t in enumerate(args):
        name[t], nbytes, out = f"d{k}", f"{size(shapes[str(t)])} * sizeof(float)", k - len(p["inputs"])
        dims = ", ".join(map(str, shapes[str(t)]))
        lines += [f"  static const int64_t s{k}[] = {{{dims}}};",
                  f"  float* a{k} = (float*)byoc_arg(args, {k}, s{k}, {len(shapes[str(t)])}, 2, 32, {sym}_name, &error);",
                  "  if (error) return error;"]
        kept = on_npu["inputs"].get(str(k)) if out < 0 else on_npu["outputs"].get(str(out))
        if kept:
            lines.append(f"  if (!{slot(kept)}) {slot(kept)} = (float*)npu_alloc({nbytes});")
        lines.append(f"  float* d{k} = {slot(kept) if kept else f'(float*)npu_alloc({nbytes})'};")
        freed += [] if kept else [f"d{k}"]
        if out < 0 and not kept:
            lines.append(f"  npu_write(d{k}, a{k}, {nbytes});")
        if out >= 0 and out not in on_npu["only"]:
            after.append(f"  npu_read(a{k}, d{k}, {nbytes});")
    temps = [op["output"] for op in p["ops"] if op["output"] not in name]
    for t in temps:  # the values inside the partition: in the NPU's memory too
        name[t] = f"v{t}"
        lines.append(f"  float* v{t} = (float*)npu_alloc({size(shapes[str(t)])} * sizeof(float));")
    lines += [op_code(op, name, shapes) for op in p["ops"]] + after
    lines += [f"  npu_free({v});" for v in freed + [f"v{t}" for t in temps]] + ["  return 0;", "}"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description="the NPU's compiler: partitions (JSON) in, C out")
    parser.add_argument("partitions")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--floats", type=int, required=True, help="how many floats the weights blob holds")
    args = parser.parse_args()
    with open(args.partitions) as spec:
        partitions = json.load(spec)
    slots = sorted({s for p in partitions for kept in (p["on_npu"]["inputs"], p["on_npu"]["outputs"])
                    for s in kept.values()})
    source = ["#include <math.h>", "#include <stdlib.h>", "#include <string.h>", WEIGHTS % ((args.floats,) * 4),
              *(f"static float* {slot(s)};" for s in slots)]
    with open(args.output, "w") as out:
        out.write("\n\n".join(source + [partition_code(p) for p in partitions]) + "\n")


if __name__ == "__main__":
    main()
