"""byoc_abi.h, the partition entry point's C ABI: a codegen written from scratch against it alone runs.

The header is what byoc's own C-source codegen and standalone programs paste, so these check the documented
interface a vendor writes against: it compiles as C and as C++ without warnings, and a codegen that emits its
own C with it (no byoc internals) computes what onnxruntime does and refuses a wrong call by the header's check.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import byoc
from byoc.vendor import Codegen, OpRule, Vendor
from byoc.vendor.abi import abi_header, entry_point, write_abi_header

from models import onnxruntime_outputs, single_op


class ScratchRelu(Codegen):
    """ReLU partitions as C of its own: the header, then one entry point per partition."""

    def compile(self, partitions, options):
        import tvm

        parts = [abi_header()]
        for graph in partitions:
            (x,), (y,) = graph.inputs, graph.outputs
            dims = ", ".join(str(d) for d in x.shape)
            size = int(np.prod(x.shape))
            parts.append(f"""
static const char {graph.symbol}_name[] = "{graph.symbol}";
#ifdef __cplusplus
extern "C"
#endif
{entry_point(graph.symbol)} {{
  static const int64_t shape[] = {{{dims}}};
  int error = 0;
  int64_t i;
  const float* x;
  float* y;
  (void)self; (void)result;
  if (num_args != 2) return byoc_fail("TypeError", {graph.symbol}_name, "expected 2 arguments");
  x = (const float*)byoc_arg(args, 0, shape, {len(x.shape)}, 2, 32, {graph.symbol}_name, &error);
  if (error) return error;
  y = (float*)byoc_arg(args, 1, shape, {len(y.shape)}, 2, 32, {graph.symbol}_name, &error);
  if (error) return error;
  for (i = 0; i < {size}; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  return 0;
}}""")
        create = tvm.get_global_func("runtime.CSourceModuleCreate")
        return [create("\n".join(parts), "c", [g.symbol for g in partitions], [])]


@pytest.mark.parametrize("language", ["c", "c++"])
def test_the_header_compiles_cleanly_as_c_and_cpp(tmp_path, language):
    compiler = shutil.which("gcc" if language == "c" else "g++")
    if compiler is None:
        pytest.skip("no host compiler")
    header = write_abi_header(tmp_path)
    source = tmp_path / "use.c"
    source.write_text(f'#include "{header.name}"\n{entry_point("p")} {{ (void)self; (void)result;\n'
                      '  return num_args == 1 && byoc_tensor(args, 0) ? 0 : byoc_fail("TypeError", "p", "no"); }\n')
    done = subprocess.run([compiler, "-x", language, "-std=" + ("c99" if language == "c" else "c++11"), "-Wall",
                           "-Wextra", "-Werror", "-fsyntax-only", str(source)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_codegen_written_against_the_header_alone_runs_and_checks_its_arguments():
    m = single_op("Relu", {"x": [2, 5]}, [2, 5])
    artifact = byoc.compile(m, [Vendor("scratch", (OpRule("relu", "relax.nn.relu"),), ScratchRelu())], strict=True)
    assert [p.vendor for p in artifact.plan.partitions] == ["scratch"]
    x = np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)
    np.testing.assert_array_equal(artifact.run({"x": x})[0], onnxruntime_outputs(m, {"x": x})[0])


def test_a_wrong_call_raises_the_headers_error_through_the_tvm_runtime(tmp_path):
    import tvm

    plan = byoc.partition(single_op("Relu", {"x": [2, 5]}, [2, 5]),
                          [Vendor("scratch", (OpRule("relu", "relax.nn.relu"),), ScratchRelu())])
    (module,) = ScratchRelu().compile([plan.graph(p) for p in plan.partitions], {})
    module.export_library(str(tmp_path / "scratch.so"))
    entry = tvm.runtime.load_module(str(tmp_path / "scratch.so"))["scratch_0"]
    x = tvm.runtime.tensor(np.ones((2, 5), np.float32))
    y = tvm.runtime.tensor(np.zeros((2, 5), np.float32))
    entry(x, y)
    np.testing.assert_array_equal(y.numpy(), np.ones((2, 5), np.float32))
    with pytest.raises(ValueError, match="scratch_0: a tensor has the wrong shape"):
        entry(x, tvm.runtime.tensor(np.zeros((5, 2), np.float32)))
    with pytest.raises(TypeError, match="scratch_0: a tensor has the wrong dtype"):
        entry(x, tvm.runtime.tensor(np.zeros((2, 5), np.int32)))
