"""Binary blobs: a codegen returns C plus bytes (byoc.vendor.CSource), and byoc links the bytes in as symbols.

Weights then travel as bytes, never as C literals. The blob must reach every place the C is compiled: the
in-memory artifact (exported to a temporary library), an exported library loaded in a fresh process, a
standalone program, and the compile cache. A codegen's bad blob is a typed error naming it.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from onnx import helper

import byoc
from byoc.errors import CodegenError
from byoc.pipeline.build.codegen_cache import CACHE_ENV
from byoc.vendor import CSource, Codegen, OpRule, Vendor
from byoc.vendor.abi import abi_header, entry_point

from models import const, model, onnxruntime_outputs, tensor

BIAS = np.linspace(-1.0, 1.0, 6, dtype=np.float32).reshape(2, 3)


class BlobAdd(Codegen):
    """x + c with c read from a blob (little-endian floats; this test runs on x86_64), as the C of its own."""

    cache_version = "1"

    def __init__(self, blob_name="add_weights"):
        self.blob_name, self.runs = blob_name, 0

    def compile(self, partitions, options):
        return [self.standalone_source(partitions)]

    def standalone_source(self, partitions):
        self.runs += 1
        (graph,) = partitions
        (call,) = graph.ops
        x, c = call.inputs
        code = abi_header() + f"""
extern const unsigned char {self.blob_name}[];
static const char name[] = "{graph.symbol}";
#ifdef __cplusplus
extern "C"
#endif
{entry_point(graph.symbol)} {{
  static const int64_t shape[] = {{2, 3}};
  int error = 0;
  const float* c = (const float*){self.blob_name};
  float* x = (float*)byoc_arg(args, 0, shape, 2, 2, 32, name, &error);
  float* y;
  (void)self; (void)result; (void)num_args;
  if (error) return error;
  y = (float*)byoc_arg(args, 1, shape, 2, 2, 32, name, &error);
  if (error) return error;
  for (int i = 0; i < 6; ++i) y[i] = x[i] + c[i];
  return 0;
}}
"""
        return CSource(code, [graph.symbol], {self.blob_name: c.data.astype("<f4").tobytes()})


def _model():
    node = helper.make_node("Add", ["x", "c"], ["y"], name="add")
    return model([node], [tensor("x", [2, 3])], [tensor("y", [2, 3])], [const("c", BIAS)])


def _vendor(codegen):
    return Vendor("blob", (OpRule("add", "relax.add"),), codegen)


X = np.arange(6, dtype=np.float32).reshape(2, 3)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))


def test_the_blob_is_linked_into_the_artifact_and_its_exported_library(tmp_path):
    m = _model()
    artifact = byoc.compile(m, [_vendor(BlobAdd())], strict=True)
    assert [p.vendor for p in artifact.plan.partitions] == ["blob"]
    want = onnxruntime_outputs(m, {"x": X})[0]
    np.testing.assert_array_equal(artifact.run({"x": X})[0], want)
    library = artifact.export(tmp_path / "blob.so")
    script = ("import sys, numpy as np, byoc\n"
              "a = byoc.load(sys.argv[1])\n"
              "print(a.run({'x': np.arange(6, dtype=np.float32).reshape(2, 3)})[0].tolist())\n")
    done = subprocess.run([sys.executable, "-c", script, str(library)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    np.testing.assert_array_equal(np.array(eval(done.stdout)), want)  # noqa: S307 - our own list's text


def test_the_blob_is_in_a_standalone_program():
    m = _model()
    artifact = byoc.compile(m, [_vendor(BlobAdd())], strict=True)
    (got,) = artifact.run_emulated({"x": X})
    np.testing.assert_array_equal(got, onnxruntime_outputs(m, {"x": X})[0])


def test_a_cached_build_brings_its_blob_back():
    m, codegen = _model(), BlobAdd()
    byoc.compile(m, [_vendor(codegen)], strict=True)
    artifact = byoc.compile(m, [_vendor(codegen)], strict=True)
    assert codegen.runs == 1
    np.testing.assert_array_equal(artifact.run({"x": X})[0], onnxruntime_outputs(m, {"x": X})[0])


def test_a_bad_blob_is_the_codegens_typed_error():
    message = "blob name 'not an identifier' is not a C identifier"
    with pytest.raises(CodegenError, match=message):
        byoc.compile(_model(), [_vendor(BlobAdd("not an identifier"))], strict=True)
    with pytest.warns(RuntimeWarning, match=message):  # not strict: the partition goes to the host
        artifact = byoc.compile(_model(), [_vendor(BlobAdd("not an identifier"))])
    assert artifact.plan.partitions == [] and message in artifact.plan.host_ops[0].reasons["blob"]
    with pytest.raises(CodegenError, match="must be bytes"):
        CSource("", (), {"ok": "text"})
