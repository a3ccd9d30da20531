"""Tests for codegens/c_source/byoc_kernels.h.

The header is compiled once (module fixture) into a shared library through a
tiny C wrapper exposing non-static entry points, loaded with ctypes and
compared against independent numpy references (plus a couple of
onnx.reference.ReferenceEvaluator cross-checks).
"""

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

HEADER = (Path(__file__).resolve().parents[1] / "codegens" / "c_source" / "byoc_kernels.h").resolve()

ADD, SUB, MUL, DIV = 0, 1, 2, 3
RELU, SIGMOID, TANH, CLIP = 0, 1, 2, 3

WRAPPER_C = r"""
#include "@HEADER@"

void w_binary(int op, const float* a, const int64_t* as, int an, const float* b,
              const int64_t* bs, int bn, float* o, const int64_t* os, int on) {
  byoc_k_binary(op, a, as, an, b, bs, bn, o, os, on);
}
void w_unary(int op, const float* x, float* y, int64_t n, float p0, float p1) {
  byoc_k_unary(op, x, y, n, p0, p1);
}
void w_matmul(const float* a, const int64_t* as, int an, const float* b, const int64_t* bs,
              int bn, float* o, const int64_t* os, int on) {
  byoc_k_matmul(a, as, an, b, bs, bn, o, os, on);
}
void w_conv2d(const float* x, const float* w, const float* bias, float* y, int64_t n, int64_t c,
              int64_t h, int64_t wd, int64_t o, int64_t kh, int64_t kw, int64_t oh, int64_t ow,
              int64_t sh, int64_t sw, int64_t pt, int64_t pl, int64_t dh, int64_t dw,
              int64_t groups, int relu) {
  byoc_k_conv2d(x, w, bias, y, n, c, h, wd, o, kh, kw, oh, ow, sh, sw, pt, pl, dh, dw, groups,
                relu);
}
void w_maxpool2d(const float* x, float* y, int64_t n, int64_t c, int64_t h, int64_t wd,
                 int64_t oh, int64_t ow, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                 int64_t pt, int64_t pl, int64_t dh, int64_t dw) {
  byoc_k_maxpool2d(x, y, n, c, h, wd, oh, ow, kh, kw, sh, sw, pt, pl, dh, dw);
}
void w_avgpool2d(const float* x, float* y, int64_t n, int64_t c, int64_t h, int64_t wd,
                 int64_t oh, int64_t ow, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                 int64_t pt, int64_t pl, int64_t pb, int64_t pr, int cip) {
  byoc_k_avgpool2d(x, y, n, c, h, wd, oh, ow, kh, kw, sh, sw, pt, pl, pb, pr, cip);
}
void w_mean(const float* x, const int64_t* shape, int ndim, const int* reduce, float* y) {
  byoc_k_mean(x, shape, ndim, reduce, y);
}
void w_softmax(const float* x, float* y, int64_t outer, int64_t axis_len, int64_t inner) {
  byoc_k_softmax(x, y, outer, axis_len, inner);
}
void w_concat(const float* const* xs, const int64_t* lens, int n, float* y, int64_t outer,
              int64_t inner) {
  byoc_k_concat(xs, lens, n, y, outer, inner);
}
void w_transpose(const float* x, const int64_t* shape, int ndim, const int64_t* perm, float* y) {
  byoc_k_transpose(x, shape, ndim, perm, y);
}
"""

FP = ctypes.POINTER(ctypes.c_float)
IP = ctypes.POINTER(ctypes.c_int64)
I64 = ctypes.c_int64
INT = ctypes.c_int


def _need(tool):
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} not available")


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    _need("gcc")
    d = tmp_path_factory.mktemp("byoc_kernels")
    src = d / "wrap.c"
    so = d / "libbyoc_kernels_test.so"
    src.write_text(WRAPPER_C.replace("@HEADER@", str(HEADER)))
    cmd = ["gcc", "-std=c99", "-O2", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror",
           str(src), "-o", str(so), "-lm"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    L = ctypes.CDLL(str(so))
    L.w_binary.argtypes = [INT, FP, IP, INT, FP, IP, INT, FP, IP, INT]
    L.w_unary.argtypes = [INT, FP, FP, I64, ctypes.c_float, ctypes.c_float]
    L.w_matmul.argtypes = [FP, IP, INT, FP, IP, INT, FP, IP, INT]
    L.w_conv2d.argtypes = [FP, FP, FP, FP] + [I64] * 16 + [INT]
    L.w_maxpool2d.argtypes = [FP, FP] + [I64] * 14
    L.w_avgpool2d.argtypes = [FP, FP] + [I64] * 14 + [INT]
    L.w_mean.argtypes = [FP, IP, INT, ctypes.POINTER(ctypes.c_int), FP]
    L.w_softmax.argtypes = [FP, FP, I64, I64, I64]
    L.w_concat.argtypes = [ctypes.POINTER(FP), IP, INT, FP, I64, I64]
    L.w_transpose.argtypes = [FP, IP, INT, IP, FP]
    for f in ("w_binary", "w_unary", "w_matmul", "w_conv2d", "w_maxpool2d", "w_avgpool2d",
              "w_mean", "w_softmax", "w_concat", "w_transpose"):
        getattr(L, f).restype = None
    return L


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

RNG = np.random.default_rng(1234)


def rand(*shape, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, size=shape).astype(np.float32)


def fp(a):
    assert a.dtype == np.float32 and a.flags.c_contiguous
    return a.ctypes.data_as(FP)


def shp(shape):
    # at least one element so the pointer is valid even for rank 0
    arr = np.array(list(shape) + [0], dtype=np.int64)
    return arr


def ip(a):
    return a.ctypes.data_as(IP)


def close(got, ref, tol=1e-5):
    np.testing.assert_allclose(got, np.asarray(ref, dtype=np.float64), rtol=tol, atol=tol)


# ---------------------------------------------------------------------------
# binary
# ---------------------------------------------------------------------------

NP_BIN = {ADD: np.add, SUB: np.subtract, MUL: np.multiply, DIV: np.divide}


@pytest.mark.parametrize("op", [ADD, SUB, MUL, DIV])
@pytest.mark.parametrize(
    "sa,sb",
    [
        ((2, 3, 4), (2, 3, 4)),   # same shape
        ((2, 3, 4), ()),          # scalar rhs
        ((), (5,)),               # scalar lhs
        ((), ()),                 # scalar both
        ((2, 3, 4), (4,)),        # rank mismatch
        ((3, 1), (2, 1, 4)),      # both sides broadcast + rank mismatch
        ((1, 3, 1, 5), (4, 1, 6, 1)),  # both sides broadcast
        ((2, 1, 3), (1, 1)),
        ((7,), (1,)),
        ((2, 0, 3), (3,)),        # empty
    ],
)
def test_binary(lib, op, sa, sb):
    a = rand(*sa)
    b = rand(*sb)
    if op == DIV:
        b = (np.sign(b) + (b == 0)) * (np.abs(b) + 0.5)
        b = b.astype(np.float32)
    ref = NP_BIN[op](a.astype(np.float64), b.astype(np.float64))
    out = np.full(ref.shape, np.nan, dtype=np.float32)
    a_s, b_s, o_s = shp(sa), shp(sb), shp(ref.shape)
    a = np.ascontiguousarray(a.reshape(sa))
    b = np.ascontiguousarray(b.reshape(sb))
    lib.w_binary(op, fp(a), ip(a_s), len(sa), fp(b), ip(b_s), len(sb), fp(out), ip(o_s), ref.ndim)
    close(out, ref)


# ---------------------------------------------------------------------------
# unary
# ---------------------------------------------------------------------------


def _unary(lib, op, x, p0=0.0, p1=0.0):
    y = np.full_like(x, np.nan)
    lib.w_unary(op, fp(x), fp(y), x.size, p0, p1)
    return y


def test_relu(lib):
    x = rand(3, 17)
    close(_unary(lib, RELU, x), np.maximum(x.astype(np.float64), 0.0))


def test_sigmoid(lib):
    x = np.concatenate([rand(50, lo=-10, hi=10),
                        np.array([-100.0, 100.0, -1e30, 1e30, -np.inf, np.inf, 0.0, -88.0, 89.0],
                                 dtype=np.float32)])
    with np.errstate(over="ignore"):
        ref = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    y = _unary(lib, SIGMOID, x)
    assert np.all(np.isfinite(y))
    close(y, ref)
    assert y[50] == 0.0 or y[50] < 1e-40  # sigmoid(-100)
    assert y[51] == 1.0


def test_tanh(lib):
    x = np.concatenate([rand(40, lo=-5, hi=5), np.array([-100, 100, 0], dtype=np.float32)])
    close(_unary(lib, TANH, x), np.tanh(x.astype(np.float64)))


@pytest.mark.parametrize(
    "lo,hi", [(-0.5, 0.75), (-np.inf, 0.3), (-0.3, np.inf), (-np.inf, np.inf), (0.0, 6.0)]
)
def test_clip(lib, lo, hi):
    x = np.concatenate([rand(33, lo=-3, hi=8), np.array([-np.inf, np.inf], dtype=np.float32)])
    close(_unary(lib, CLIP, x, lo, hi), np.clip(x.astype(np.float64), lo, hi))


# ---------------------------------------------------------------------------
# matmul
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sa,sb",
    [
        ((3, 5), (5, 4)),                 # plain 2-D
        ((1, 1), (1, 1)),
        ((2, 3, 5), (2, 5, 4)),           # batched
        ((2, 3, 5), (5, 4)),              # broadcast rhs
        ((5, 4), (3, 4, 6)),              # broadcast lhs
        ((2, 1, 3, 5), (4, 5, 2)),        # broadcast batch both sides
        ((5,), (5, 4)),                   # 1-D lhs
        ((3, 5), (5,)),                   # 1-D rhs
        ((5,), (5,)),                     # dot product -> scalar
        ((5,), (2, 5, 3)),                # 1-D lhs, batched rhs
        ((2, 3, 5), (5,)),                # batched lhs, 1-D rhs
        ((3, 0), (0, 4)),                 # K == 0 -> zeros
        ((7, 33), (33, 17)),
    ],
)
def test_matmul(lib, sa, sb):
    a = rand(*sa)
    b = rand(*sb)
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    out = np.full(np.shape(ref), np.nan, dtype=np.float32)
    a_s, b_s, o_s = shp(sa), shp(sb), shp(np.shape(ref))
    lib.w_matmul(fp(a), ip(a_s), len(sa), fp(b), ip(b_s), len(sb), fp(out), ip(o_s), out.ndim)
    close(out, ref, 1e-4)


# ---------------------------------------------------------------------------
# conv2d
# ---------------------------------------------------------------------------


def conv_out(h, k, s, pb, pe, d):
    return (h + pb + pe - d * (k - 1) - 1) // s + 1


def conv_ref(x, w, b, stride, pads, dil, groups, relu):
    """pads = (top, left, bottom, right)."""
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    sh, sw = stride
    pt, pl, pb, pr = pads
    dh, dw = dil
    oh = conv_out(h, kh, sh, pt, pb, dh)
    ow = conv_out(wd, kw, sw, pl, pr, dw)
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    y = np.zeros((n, o, oh, ow))
    og = o // groups
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        wg = w[g * og:(g + 1) * og]
        for ki in range(kh):
            for kj in range(kw):
                patch = xs[:, :, ki * dh: ki * dh + sh * (oh - 1) + 1: sh,
                           kj * dw: kj * dw + sw * (ow - 1) + 1: sw]
                y[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, wg[:, :, ki, kj])
    if b is not None:
        y += b.astype(np.float64)[None, :, None, None]
    if relu:
        y = np.maximum(y, 0.0)
    return y


def run_conv(lib, x, w, b, stride, pads, dil, groups, relu):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh = conv_out(h, kh, stride[0], pads[0], pads[2], dil[0])
    ow = conv_out(wd, kw, stride[1], pads[1], pads[3], dil[1])
    y = np.full((n, o, oh, ow), np.nan, dtype=np.float32)
    lib.w_conv2d(fp(x), fp(w), fp(b) if b is not None else None, fp(y), n, c, h, wd, o, kh, kw,
                 oh, ow, stride[0], stride[1], pads[0], pads[1], dil[0], dil[1], groups,
                 1 if relu else 0)
    return y


CONV_CASES = [
    # (N, C, H, W), (O, KH, KW), stride, pads(t,l,b,r), dil, groups, bias, relu
    ((1, 3, 8, 8), (4, 3, 3), (1, 1), (0, 0, 0, 0), (1, 1), 1, False, False),
    ((2, 3, 9, 7), (5, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, True, False),
    ((1, 4, 10, 11), (6, 3, 2), (2, 3), (1, 0, 2, 1), (1, 1), 2, True, True),   # groups, strides, asym pads
    ((2, 6, 9, 9), (6, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 6, True, True),     # depthwise
    ((1, 4, 8, 8), (8, 3, 3), (2, 2), (2, 2, 2, 2), (1, 1), 4, False, False),   # depthwise multiplier 2
    ((1, 2, 12, 13), (3, 3, 3), (1, 2), (2, 1, 1, 3), (2, 3), 1, True, False),  # dilations
    ((1, 3, 5, 5), (2, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, True, True),     # 1x1
    ((1, 2, 4, 4), (3, 5, 5), (1, 1), (3, 3, 3, 3), (1, 1), 1, False, True),    # kernel bigger than input
    ((1, 2, 7, 6), (2, 3, 3), (3, 3), (0, 2, 0, 0), (2, 1), 1, False, False),
]


@pytest.mark.parametrize("xs,ws,stride,pads,dil,groups,use_bias,relu", CONV_CASES)
def test_conv2d(lib, xs, ws, stride, pads, dil, groups, use_bias, relu):
    n, c, h, wd = xs
    o, kh, kw = ws
    x = rand(n, c, h, wd)
    w = rand(o, c // groups, kh, kw)
    b = rand(o) if use_bias else None
    got = run_conv(lib, x, w, b, stride, pads, dil, groups, relu)
    close(got, conv_ref(x, w, b, stride, pads, dil, groups, relu), 1e-4)


def test_conv2d_vs_onnx(lib):
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    x = rand(2, 4, 11, 10)
    w = rand(6, 2, 3, 2)
    b = rand(6)
    stride, pads, dil, groups = (2, 1), (1, 0, 2, 1), (1, 2), 2
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=list(stride),
                            pads=[pads[0], pads[1], pads[2], pads[3]], dilations=list(dil),
                            group=groups)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, None) for k in ("x", "w", "b")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    (ref,) = ReferenceEvaluator(model).run(None, {"x": x, "w": w, "b": b})
    got = run_conv(lib, x, w, b, stride, pads, dil, groups, False)
    assert got.shape == ref.shape
    close(got, ref, 1e-4)


# ---------------------------------------------------------------------------
# pooling
# ---------------------------------------------------------------------------


def pool_out(h, k, s, pb, pe, d, ceil):
    eff = d * (k - 1) + 1
    if ceil:
        o = -(-(h + pb + pe - eff) // s) + 1
        if (o - 1) * s >= h + pb:  # last window must start inside input or top/left pad
            o -= 1
        return o
    return (h + pb + pe - eff) // s + 1


def maxpool_ref(x, k, stride, pads, dil, ceil):
    n, c, h, wd = x.shape
    kh, kw = k
    sh, sw = stride
    pt, pl, pb, pr = pads
    dh, dw = dil
    oh = pool_out(h, kh, sh, pt, pb, dh, ceil)
    ow = pool_out(wd, kw, sw, pl, pr, dw, ceil)
    need_h = (oh - 1) * sh + dh * (kh - 1) + 1
    need_w = (ow - 1) * sw + dw * (kw - 1) + 1
    xp = np.full((n, c, max(need_h, pt + h), max(need_w, pl + wd)), -np.inf)
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    y = np.full((n, c, oh, ow), -np.inf)
    for ki in range(kh):
        for kj in range(kw):
            y = np.maximum(y, xp[:, :, ki * dh: ki * dh + sh * (oh - 1) + 1: sh,
                                 kj * dw: kj * dw + sw * (ow - 1) + 1: sw])
    return y


def run_maxpool(lib, x, k, stride, pads, dil, ceil):
    n, c, h, wd = x.shape
    oh = pool_out(h, k[0], stride[0], pads[0], pads[2], dil[0], ceil)
    ow = pool_out(wd, k[1], stride[1], pads[1], pads[3], dil[1], ceil)
    y = np.full((n, c, oh, ow), np.nan, dtype=np.float32)
    lib.w_maxpool2d(fp(x), fp(y), n, c, h, wd, oh, ow, k[0], k[1], stride[0], stride[1],
                    pads[0], pads[1], dil[0], dil[1])
    return y


MAXPOOL_CASES = [
    # (N,C,H,W), k, stride, pads(t,l,b,r), dil, ceil
    ((1, 2, 8, 8), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), False),
    ((2, 3, 9, 9), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False),
    ((1, 2, 7, 8), (3, 3), (2, 2), (0, 0, 0, 0), (1, 1), True),    # ceil: windows run past end
    ((1, 2, 10, 9), (3, 2), (2, 3), (1, 0, 1, 1), (1, 1), True),   # ceil + asym pads
    ((1, 1, 9, 10), (2, 3), (1, 2), (1, 2, 0, 1), (2, 2), False),  # dilation
    ((1, 2, 6, 6), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False),
]


@pytest.mark.parametrize("xs,k,stride,pads,dil,ceil", MAXPOOL_CASES)
def test_maxpool2d(lib, xs, k, stride, pads, dil, ceil):
    x = rand(*xs, lo=-5, hi=-1)  # all negative: zero padding would win if used
    got = run_maxpool(lib, x, k, stride, pads, dil, ceil)
    ref = maxpool_ref(x.astype(np.float64), k, stride, pads, dil, ceil)
    assert np.all(np.isfinite(got))
    close(got, ref)


def test_maxpool2d_vs_onnx(lib):
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    x = rand(1, 3, 10, 9, lo=-5, hi=-1)
    k, stride, pads = (3, 3), (2, 2), (1, 1, 1, 1)
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=list(k), strides=list(stride),
                            pads=list(pads), ceil_mode=1)
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    (ref,) = ReferenceEvaluator(model).run(None, {"x": x})
    got = run_maxpool(lib, x, k, stride, pads, (1, 1), True)
    assert got.shape == ref.shape
    close(got, ref)


def avgpool_ref(x, k, stride, pads, cip, ceil):
    n, c, h, wd = x.shape
    kh, kw = k
    sh, sw = stride
    pt, pl, pb, pr = pads
    oh = pool_out(h, kh, sh, pt, pb, 1, ceil)
    ow = pool_out(wd, kw, sw, pl, pr, 1, ceil)
    H = max((oh - 1) * sh + kh, pt + h + pb)
    W = max((ow - 1) * sw + kw, pl + wd + pr)
    val = np.zeros((n, c, H, W))
    val[:, :, pt:pt + h, pl:pl + wd] = x
    mask = np.zeros((H, W))
    if cip:
        mask[: pt + h + pb, : pl + wd + pr] = 1.0
    else:
        mask[pt:pt + h, pl:pl + wd] = 1.0
    s = np.zeros((n, c, oh, ow))
    cnt = np.zeros((oh, ow))
    for ki in range(kh):
        for kj in range(kw):
            sl = (slice(ki, ki + sh * (oh - 1) + 1, sh), slice(kj, kj + sw * (ow - 1) + 1, sw))
            s += val[(Ellipsis,) + sl]
            cnt += mask[sl]
    return s / cnt


def run_avgpool(lib, x, k, stride, pads, cip, ceil):
    n, c, h, wd = x.shape
    oh = pool_out(h, k[0], stride[0], pads[0], pads[2], 1, ceil)
    ow = pool_out(wd, k[1], stride[1], pads[1], pads[3], 1, ceil)
    y = np.full((n, c, oh, ow), np.nan, dtype=np.float32)
    lib.w_avgpool2d(fp(x), fp(y), n, c, h, wd, oh, ow, k[0], k[1], stride[0], stride[1],
                    pads[0], pads[1], pads[2], pads[3], 1 if cip else 0)
    return y


AVGPOOL_CASES = [
    # (N,C,H,W), k, stride, pads(t,l,b,r), ceil
    ((1, 2, 8, 8), (2, 2), (2, 2), (0, 0, 0, 0), False),
    ((2, 3, 9, 9), (3, 3), (2, 2), (1, 1, 1, 1), False),
    ((1, 2, 7, 8), (3, 3), (2, 2), (1, 1, 1, 1), True),   # ceil: windows past padded extent
    ((1, 2, 10, 9), (3, 2), (2, 3), (1, 0, 2, 1), True),  # asym pads
    ((1, 1, 6, 7), (3, 3), (1, 1), (2, 1, 0, 2), False),
    ((1, 2, 5, 5), (5, 5), (1, 1), (2, 2, 2, 2), False),  # global-ish, mostly padding
]


@pytest.mark.parametrize("cip", [False, True])
@pytest.mark.parametrize("xs,k,stride,pads,ceil", AVGPOOL_CASES)
def test_avgpool2d(lib, xs, k, stride, pads, ceil, cip):
    x = rand(*xs)
    got = run_avgpool(lib, x, k, stride, pads, cip, ceil)
    close(got, avgpool_ref(x.astype(np.float64), k, stride, pads, cip, ceil))


@pytest.mark.parametrize("cip", [0, 1])
def test_avgpool2d_vs_onnx(lib, cip):
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    x = rand(1, 2, 9, 8)
    k, stride, pads = (3, 3), (2, 2), (1, 1, 1, 1)
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=list(k),
                            strides=list(stride), pads=list(pads), count_include_pad=cip)
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    (ref,) = ReferenceEvaluator(model).run(None, {"x": x})
    got = run_avgpool(lib, x, k, stride, pads, cip, False)
    assert got.shape == ref.shape
    close(got, ref)


# ---------------------------------------------------------------------------
# mean / softmax
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape,axes",
    [
        ((2, 3, 4, 5), (2, 3)),      # global average pool style
        ((2, 3, 4, 5), (0,)),
        ((2, 3, 4, 5), (1,)),
        ((2, 3, 4, 5), (3,)),
        ((2, 3, 4, 5), (0, 2)),
        ((2, 3, 4, 5), (0, 1, 2, 3)),
        ((2, 3, 4, 5), ()),          # nothing reduced -> copy
        ((7,), (0,)),
        ((3, 1, 4), (1,)),
        ((64, 300), (1,)),
    ],
)
def test_mean(lib, shape, axes):
    x = rand(*shape)
    ref = np.mean(x.astype(np.float64), axis=axes) if axes else x.astype(np.float64)
    y = np.full(np.shape(ref), np.nan, dtype=np.float32)
    flags = np.array([1 if d in axes else 0 for d in range(len(shape))], dtype=np.intc)
    s = shp(shape)
    lib.w_mean(fp(x), ip(s), len(shape), flags.ctypes.data_as(ctypes.POINTER(ctypes.c_int)),
               fp(y))
    close(y, ref)


def softmax_ref(x, axis):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize(
    "shape,axis",
    [((4, 5, 6), 0), ((4, 5, 6), 1), ((4, 5, 6), 2), ((3, 10), 1), ((10,), 0), ((2, 1, 3), 1)],
)
def test_softmax(lib, shape, axis):
    x = rand(*shape, lo=-10, hi=10)
    x.flat[0] = 80.0  # would overflow exp without max subtraction
    x.flat[-1] = 95.0
    y = np.full_like(x, np.nan)
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    lib.w_softmax(fp(x), fp(y), outer, shape[axis], inner)
    close(y, softmax_ref(x, axis))


# ---------------------------------------------------------------------------
# concat / transpose
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shapes,axis",
    [
        ([(2, 3, 4), (2, 5, 4), (2, 1, 4)], 1),
        ([(2, 3), (4, 3)], 0),
        ([(2, 3), (2, 2), (2, 0), (2, 7)], 1),
        ([(1, 2, 2, 3), (1, 3, 2, 3)], 1),
        ([(5,)], 0),
    ],
)
def test_concat(lib, shapes, axis):
    xs = [rand(*s) for s in shapes]
    ref = np.concatenate(xs, axis=axis)
    y = np.full(ref.shape, np.nan, dtype=np.float32)
    ptrs = (FP * len(xs))(*[fp(x) for x in xs])
    lens = np.array([s[axis] for s in shapes], dtype=np.int64)
    outer = int(np.prod(ref.shape[:axis], dtype=np.int64))
    inner = int(np.prod(ref.shape[axis + 1:], dtype=np.int64))
    lib.w_concat(ptrs, ip(lens), len(xs), fp(y), outer, inner)
    close(y, ref, 0)


@pytest.mark.parametrize(
    "shape,perm",
    [
        ((3, 4), (1, 0)),
        ((2, 3, 4), (2, 0, 1)),
        ((2, 3, 4), (0, 1, 2)),
        ((2, 3, 4, 5), (0, 2, 3, 1)),   # NCHW -> NHWC
        ((2, 3, 4, 5), (3, 1, 0, 2)),
        ((1, 2, 1, 3, 2, 1, 2, 2), (7, 6, 5, 4, 3, 2, 1, 0)),  # rank 8
        ((5,), (0,)),
    ],
)
def test_transpose(lib, shape, perm):
    x = rand(*shape)
    ref = np.transpose(x, perm)
    y = np.full(ref.shape, np.nan, dtype=np.float32)
    s = shp(shape)
    p = np.array(perm, dtype=np.int64)
    lib.w_transpose(fp(x), ip(s), len(shape), ip(p), fp(y))
    close(y, ref, 0)


# ---------------------------------------------------------------------------
# header hygiene
# ---------------------------------------------------------------------------


def test_header_compiles_as_cxx(tmp_path):
    _need("g++")
    src = tmp_path / "hdr.cc"
    src.write_text(f'#include "{HEADER}"\nint main() {{ return 0; }}\n')
    res = subprocess.run(["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                          str(src)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_header_compiles_as_pedantic_c99(tmp_path):
    # Unused static functions must not warn; -pedantic must be clean.
    _need("gcc")
    src = tmp_path / "hdr.c"
    src.write_text(f'#include "{HEADER}"\n#include "{HEADER}"\nint main(void) {{ return 0; }}\n')
    res = subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic",
                          "-O2", "-c", str(src), "-o", str(tmp_path / "hdr.o")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
