"""The standalone program on the build host: folder layout, tensor files, edge cases, refusals.

Numerics on every target (and under qemu) are in test_cross.py; here the
program is built for x86_64 and checked against onnxruntime.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import byoc
from byoc.deploy import standalone, toolchain
from byoc.pipeline.artifact.artifact import Artifact
from byoc.codegens.c_source import CSourceCodegen
from byoc.errors import InputError
from byoc.deploy.standalone import StandaloneError, read_tensors, write_tensors
from byoc.vendor import SUPPORTED, OpRule, Vendor

from cross_models import inputs_for, mlp, small_cnn

RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(scope="module", autouse=True)
def host_toolchain():
    try:
        toolchain.install_missing("x86_64")
    except toolchain.AptUnavailable as err:
        pytest.skip(f"the host C toolchain is missing and cannot be installed: {err}")


@pytest.fixture(scope="module", autouse=True)
def standalone_methods():
    """Artifact.export_standalone / run_emulated, until artifact.py grows them."""
    patch = pytest.MonkeyPatch()
    if not hasattr(Artifact, "run_emulated"):
        patch.setattr(Artifact, "export_standalone", standalone.export_standalone, raising=False)
        patch.setattr(Artifact, "run_emulated", standalone.run_emulated, raising=False)
    yield
    patch.undo()


@pytest.fixture(scope="module")
def cnn():
    model = small_cnn()
    return model, byoc.compile(model, ["c_source"], keep_on_host=["Sigmoid", "Flatten"])


def reference(model, inputs):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, inputs)


# -- tensor files ----------------------------------------------------------------------
def test_tensor_file_is_little_endian_and_round_trips(tmp_path):
    arrays = [np.array([1.0], dtype=np.float32), np.arange(6, dtype=">i8").reshape(2, 3),
              np.array([[250, 3]], dtype=np.uint8), np.array([0.5, -2.0], dtype=np.float64)]
    path = tmp_path / "t.bin"
    write_tensors(path, arrays)
    data = path.read_bytes()
    # magic, count, then the first tensor: code 2 (float), 32 bits, ndim 1, dim 1, 1.0f little-endian
    assert data[:8] == b"BYOCTNS1"
    assert data[8:12] == (4).to_bytes(4, "little")
    assert data[12:24] == bytes([2, 0, 0, 0, 32, 0, 0, 0, 1, 0, 0, 0])
    assert data[24:32] == (1).to_bytes(8, "little")
    assert data[32:36] == bytes([0x00, 0x00, 0x80, 0x3F])
    back = read_tensors(path)
    for got, want in zip(back, arrays):
        assert got.dtype == want.dtype.newbyteorder("=") and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_corrupt_tensor_file_is_refused(tmp_path):
    path = tmp_path / "t.bin"
    path.write_bytes(b"NOTBYOC!")
    with pytest.raises(StandaloneError, match="not a byoc tensor file"):
        read_tensors(path)
    write_tensors(path, [np.zeros((4, 4), np.float32)])
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(StandaloneError, match="truncated"):
        read_tensors(path)


# -- the program folder ----------------------------------------------------------------
def test_export_writes_a_program_that_make_builds_and_runs(cnn, tmp_path):
    model, artifact = cnn
    folder = tmp_path / "prog"
    program = artifact.export_standalone(folder)
    assert sorted(p.name for p in folder.iterdir()) == [
        "Makefile", "kernels.o", "model.c", "partitions_c_source.c"]
    source = (folder / "model.c").read_text()
    # No TVM runtime: the kernels are called directly, the stubs are defined here.
    assert "__tvm_ffi_c_source_0(NULL" in source and "__tvm_ffi_fused_batch_norm(NULL" in source
    assert "__TVMBackendAllocWorkspace" in source and "#include <tvm" not in source
    assert not any("tvm" in arg for arg in program.build_command("cc"))
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    subprocess.run(["make", "CC=gcc"], cwd=folder, check=True, capture_output=True)
    inputs = inputs_for(model)
    write_tensors(folder / "in.bin", [inputs["x"]])
    subprocess.run(["./model", "in.bin", "out.bin"], cwd=folder, check=True, capture_output=True)
    np.testing.assert_allclose(read_tensors(folder / "out.bin")[0], reference(model, inputs)[0],
                               rtol=RTOL, atol=ATOL)


def test_program_rejects_input_files_that_do_not_match(cnn, tmp_path):
    _, artifact = cnn
    program = artifact.export_standalone(tmp_path / "prog")
    binary = standalone.build_program(program)
    write_tensors(tmp_path / "bad.bin", [np.zeros((1, 3, 8, 8), np.float32)])
    proc = subprocess.run([str(binary), str(tmp_path / "bad.bin"), str(tmp_path / "out.bin")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "input 0 has the wrong shape" in proc.stderr
    write_tensors(tmp_path / "bad.bin", [np.zeros((1, 3, 16, 16), np.float64)])
    proc = subprocess.run([str(binary), str(tmp_path / "bad.bin"), str(tmp_path / "out.bin")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "wrong dtype" in proc.stderr


def test_run_emulated_checks_inputs_before_building(cnn):
    _, artifact = cnn
    with pytest.raises(InputError, match="expected"):
        artifact.run_emulated({"x": np.zeros((1, 3, 8, 8), np.float32)})


def test_outputs_that_alias_an_input_and_each_other():
    """Graph outputs that are an input passed through, and the same tensor twice."""
    nodes = [helper.make_node("Identity", ["x"], ["same"], name="id"),
             helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Identity", ["r"], ["r2"], name="id2"),
             helper.make_node("Sigmoid", ["r"], ["s"], name="sig")]
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 5]) for n in ("x", "same", "r2", "s")]
    graph = helper.make_graph(nodes, "aliases", vi[:1], vi[1:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    artifact = byoc.compile(model, ["c_source"], keep_on_host=["Sigmoid"])
    inputs = inputs_for(model)
    for got, want in zip(artifact.run_emulated(inputs), reference(model, inputs)):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_fully_offloaded_model_needs_no_kernel_object(tmp_path):
    model = mlp()
    artifact = byoc.compile(model, ["c_source"])
    program = artifact.export_standalone(tmp_path / "prog")
    assert program.objects == []
    inputs = inputs_for(model)
    for got, want in zip(artifact.run_emulated(inputs), reference(model, inputs)):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


# -- refusals ----------------------------------------------------------------------------
def test_non_empty_folder_is_refused(cnn, tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    with pytest.raises(StandaloneError, match="not an empty folder"):
        cnn[1].export_standalone(tmp_path)


def test_loaded_artifact_is_refused(cnn, tmp_path):
    path = cnn[1].export(tmp_path / "model.so")
    with pytest.raises(StandaloneError, match="loaded from a file.*byoc.compile"):
        byoc.load(path).export_standalone(tmp_path / "prog")


class _OpaqueCodegen:
    """A codegen that is not C-source (as the JSON runtime's): its modules need the TVM runtime."""

    def compile(self, partitions, options):
        return CSourceCodegen().compile(partitions, options)


def test_partitions_of_other_codegens_are_refused_with_the_reason(tmp_path):
    vendor = Vendor("opaque", (OpRule("opaque.relu", "relax.nn.relu", lambda match: SUPPORTED),), _OpaqueCodegen())
    artifact = byoc.compile(small_cnn(), [vendor])
    assert [p.vendor for p in artifact.plan.partitions] == ["opaque", "opaque"]
    with pytest.raises(StandaloneError, match="opaque_0, opaque_1 of vendor 'opaque'.*TVM runtime"):
        artifact.export_standalone(tmp_path / "prog")
