"""Whole pipeline against onnxruntime: the small CNN and MLP, export/load, run-time input checks."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest

import byoc
from byoc.errors import ArtifactLoadError, BuildError, InputError

from models import onnxruntime_outputs, random_inputs, small_cnn, small_mlp

RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(scope="module")
def cnn_artifact():
    return byoc.compile(small_cnn(), vendors=["c_source"], target="x86_64")


@pytest.mark.parametrize("make", [small_cnn, small_mlp])
def test_matches_onnxruntime(make):
    m = make()
    artifact = byoc.compile(m, vendors=["c_source"], target="x86_64")
    assert artifact.plan.partitions, "the model must actually be partitioned"
    for seed in range(3):
        inputs = random_inputs(m, seed)
        for got, want in zip(artifact.run(inputs), onnxruntime_outputs(m, inputs)):
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_partition_function_and_cli_module_are_one_object():
    import importlib

    module = importlib.import_module("byoc.partition")
    assert module is byoc.partition and callable(byoc.partition)
    assert byoc.partition(small_mlp()).partitions


def test_export_then_load_in_a_fresh_process(cnn_artifact, tmp_path):
    m = small_cnn()
    inputs = random_inputs(m, 7)
    path = cnn_artifact.export(tmp_path / "cnn.so")
    np.savez(tmp_path / "in.npz", **inputs)
    script = (
        "import sys, numpy as np, byoc\n"
        "a = byoc.load(sys.argv[1])\n"
        "x = dict(np.load(sys.argv[2]))\n"
        "np.save(sys.argv[3], a.run(x)[0])\n"
    )
    subprocess.run([sys.executable, "-c", script, str(path), str(tmp_path / "in.npz"), str(tmp_path / "out.npy")],
                   check=True, timeout=300)
    got = np.load(tmp_path / "out.npy")
    np.testing.assert_allclose(got, onnxruntime_outputs(m, inputs)[0], rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(got, cnn_artifact.run(inputs)[0])


def test_export_never_overwrites(cnn_artifact, tmp_path):
    target = tmp_path / "model.onnx"
    onnx.save(small_cnn(), target)
    before = target.read_bytes()
    with pytest.raises(BuildError, match="already exists"):
        cnn_artifact.export(target)
    assert target.read_bytes() == before


def test_load_rejects_what_is_not_an_artifact(tmp_path):
    with pytest.raises(ArtifactLoadError, match="not found"):
        byoc.load(tmp_path / "missing.so")
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"\x7fELF not really")
    with pytest.raises(ArtifactLoadError):
        byoc.load(junk)
    with pytest.raises(ArtifactLoadError, match="a folder, not an artifact file"):
        byoc.load(tmp_path)
    onnx.save(small_cnn(), tmp_path / "model.onnx")
    with pytest.raises(ArtifactLoadError, match=r"'.*model.onnx' is not a shared library; byoc.load expects the "
                                                r"\.so that Artifact.export wrote\. It looks like an ONNX model: "
                                                r"compile it first"):
        byoc.load(tmp_path / "model.onnx")


def test_inputs_as_list_and_as_dict(cnn_artifact):
    x = random_inputs(small_cnn())["input"]
    np.testing.assert_array_equal(cnn_artifact.run([x])[0], cnn_artifact.run({"input": x})[0])


def test_outputs_are_the_callers_own_and_inputs_are_left_alone():
    """Inputs reach the VM as copies and outputs leave it as copies: an output that is the model's
    constant, or its input passed through, can be changed by the caller without changing the next run."""
    from onnx import TensorProto, helper

    c = helper.make_tensor("c", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])
    graph = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["k"], name="k"), helper.make_node("Identity", ["x"], ["y"], name="y"),
         helper.make_node("Relu", ["x"], ["r"], name="r")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in ("k", "y", "r")], [c])
    artifact = byoc.compile(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), [])
    x = np.array([-1.0, 0.5, 2.0], np.float32)
    x_given = x.copy()
    k, y, r = artifact.run({"x": x})
    assert not np.shares_memory(y, x)
    for out in (k, y, r):
        out[...] = 99.0
    np.testing.assert_array_equal(x, x_given)
    k, y, r = artifact.run({"x": x})
    np.testing.assert_array_equal(k, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(y, x_given)
    np.testing.assert_array_equal(r, [0.0, 0.5, 2.0])


@pytest.mark.parametrize("bad,match", [
    ({"wrong_name": np.zeros((1, 3, 16, 16), np.float32)}, "missing \\['input'\\]"),
    ({"input": np.zeros((1, 3, 8, 8), np.float32)}, "shape"),
    ({"input": np.zeros((1, 3, 16, 16), np.float64)}, "dtype float64"),
    ([np.zeros((1, 3, 16, 16), np.float32)] * 2, "takes 1 input"),
])
def test_bad_run_inputs(cnn_artifact, bad, match):
    with pytest.raises(InputError, match=match):
        cnn_artifact.run(bad)


def test_a_build_leaves_no_tvm_global_behind_and_never_replaces_one(tmp_path):
    """RunCodegen's relax.ext.<name> lookups go to names of the build, removed afterwards."""
    import tvm_ffi

    from byoc.codegens.c_source import CSourceCodegen
    from byoc.vendor import OpRule, Vendor

    def ext_names():
        return {n for n in tvm_ffi.registry.list_global_func_names() if n.startswith("relax.ext.")}

    before = ext_names()
    owned = "relax.ext.theirs"  # a codegen global someone else registered, named like our vendor
    tvm_ffi.register_global_func(owned, lambda *args: "theirs")
    try:
        vendor = Vendor("theirs", (OpRule("theirs.relu", "relax.nn.relu"),), CSourceCodegen())
        m = small_mlp()
        artifact = byoc.compile(m, vendors=[vendor, "c_source"])
        assert {p.vendor for p in artifact.plan.partitions} == {"theirs", "c_source"}
        inputs = random_inputs(m)
        np.testing.assert_allclose(artifact.run(inputs)[0], onnxruntime_outputs(m, inputs)[0], rtol=1e-4, atol=1e-5)
        assert tvm_ffi.get_global_func(owned)() == "theirs"
        assert ext_names() == before | {owned}
    finally:
        tvm_ffi.remove_global_func(owned)


@pytest.mark.parametrize("vendor", ["c_source", "json_runtime", "dnnl"])
def test_an_exported_library_holds_each_weight_once(vendor, tmp_path):
    """A vendor's module holds its partition's constants; TVM's constant loader would hold them again (ResNet-18
    exported to 93.5 MB from a 46.7 MB model). The weight's bytes appear once in the file, and it still computes."""
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).standard_normal((256, 512)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "one_weight",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 512])],
                              [numpy_helper.from_array(w, "w")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    artifact = byoc.compile(m, vendors=[vendor])
    assert [p.vendor for p in artifact.plan.partitions] == [vendor]
    path = tmp_path / "m.so"
    artifact.export(path)
    data = path.read_bytes()
    assert all(data.count(w[row].tobytes()) == 1 for row in (0, 100, 255))
    assert path.stat().st_size < 1.5 * w.nbytes
    feed = random_inputs(m, seed=2)
    np.testing.assert_allclose(byoc.load(path).run(feed)[0], onnxruntime_outputs(m, feed)[0], rtol=1e-4, atol=1e-4)
