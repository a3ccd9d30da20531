"""What a run shares with its caller (byoc.host.run_io): an input goes to the program without a copy only where its
readers take its address, an output comes back without one only when the program made it in the call, and
neither sharing ever lets the caller's input, a constant of the program or an earlier result change. Values are
checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import byoc
from byoc.errors import VendorError
from byoc.vendor import Codegen, Vendor
from tests.models import onnxruntime_outputs


def _model(nodes, outputs, initializers=(), shape=(1, 8, 6, 6)) -> onnx.ModelProto:
    """``outputs``: name -> shape (default: the input's)."""
    graph = helper.make_graph(
        nodes, "io", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, list(out or shape)) for name, out in outputs.items()],
        list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _at_offset(shape, offset: int, seed=0) -> np.ndarray:
    """A C-contiguous float32 array whose address is ``offset`` bytes past a 64-byte boundary."""
    values = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    buffer = np.empty(values.nbytes + 128, np.uint8)
    start = (-buffer.ctypes.data % 64) + offset
    array = buffer[start:start + values.nbytes].view(np.float32).reshape(shape)
    array[...] = values
    assert array.ctypes.data % 64 == offset
    return array


def _relu_then_sigmoid() -> onnx.ModelProto:
    return _model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sigmoid", ["r"], ["y"])], {"y": None})


@pytest.mark.parametrize("vendors, alignment", [(["json_runtime"], 1), ([], 64)])
def test_an_input_is_copied_only_when_a_reader_needs_more_alignment_than_it_has(vendors, alignment):
    model = _relu_then_sigmoid()
    artifact = byoc.compile(model, vendors=vendors)
    assert artifact._run_io()["input_alignment"] == [alignment]  # the host's functions assume 64 bytes
    aligned, x = _at_offset((1, 8, 6, 6), offset=0), _at_offset((1, 8, 6, 6), offset=4)
    assert np.shares_memory(np.from_dlpack(artifact.tvm_inputs([aligned])[0]), aligned)
    shared = np.shares_memory(np.from_dlpack(artifact.tvm_inputs([x])[0]), x)
    assert shared == (alignment == 1)
    kept = x.copy()
    (y,) = artifact.run({"x": x})
    np.testing.assert_allclose(y, onnxruntime_outputs(model, {"x": kept})[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(x, kept)  # nothing wrote into the caller's array
    aligned.flags.writeable = False  # a read-only array runs as well, shared or copied
    np.testing.assert_allclose(artifact.run({"x": aligned})[0], onnxruntime_outputs(model, {"x": aligned.copy()})[0],
                               rtol=1e-5, atol=1e-6)


def test_an_output_the_program_made_is_returned_without_a_copy_and_stays_the_callers():
    model = _relu_then_sigmoid()
    artifact = byoc.compile(model, vendors=["json_runtime"])
    assert artifact._run_io()["fresh_outputs"] == [True]
    x = np.random.default_rng(1).standard_normal((1, 8, 6, 6)).astype(np.float32)
    (first,) = artifact.run({"x": x})
    expected = first.copy()
    (second,) = artifact.run({"x": -x})
    assert not np.shares_memory(first, second) and not np.shares_memory(first, x)
    np.testing.assert_array_equal(first, expected)  # the next run did not write into the first result
    first[...] = 7  # the caller's own array: writable, and the program's next run is not changed by it
    np.testing.assert_allclose(artifact.run({"x": x})[0], expected)


def test_an_input_a_constant_or_a_tensor_returned_twice_comes_back_as_a_copy():
    shape = (1, 8, 6, 6)
    table = numpy_helper.from_array(np.arange(8, dtype=np.float32), "table")
    model = _model(
        [helper.make_node("Identity", ["x"], ["same"]),
         helper.make_node("Reshape", ["x", "flat_shape"], ["flat"]),
         helper.make_node("Identity", ["table"], ["constant"]),
         helper.make_node("Relu", ["x"], ["r"]),
         helper.make_node("Identity", ["r"], ["twice"])],
        {"same": None, "flat": [1, 288], "constant": [8], "r": None, "twice": None},
        [table, numpy_helper.from_array(np.array([1, -1], np.int64), "flat_shape")], shape)
    for vendors in ([], ["json_runtime"]):
        artifact = byoc.compile(model, vendors=vendors)
        same, flat, constant, r, twice = artifact._run_io()["fresh_outputs"]
        assert not (same or constant or r or twice), vendors
        assert flat == bool(vendors)  # a view of the input on the host; the vendor's own tensor otherwise
        x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
        kept = x.copy()
        outputs = artifact.run({"x": x})
        expected = onnxruntime_outputs(model, {"x": kept})
        for got, want in zip(outputs, expected):
            np.testing.assert_allclose(got, want, rtol=1e-6)
        for got in outputs:
            assert not np.shares_memory(got, x)
            got[...] = -1.0  # changes nothing the program or the caller holds
        assert not np.shares_memory(outputs[3], outputs[4])
        np.testing.assert_array_equal(x, kept)
        again = artifact.run({"x": x})
        for got, want in zip(again, expected):
            np.testing.assert_allclose(got, want, rtol=1e-6)


class _Codegen(Codegen):
    input_alignment = 3

    def compile(self, partitions, options):
        return []


def test_an_input_alignment_that_is_not_a_power_of_two_is_refused_when_the_vendor_is_made():
    with pytest.raises(VendorError, match="input_alignment must be a power of two"):
        Vendor("odd_alignment", rules=[], codegen=_Codegen())


@pytest.mark.parametrize("vendors", [["dnnl"], []])
def test_a_bound_run_reads_what_the_callers_array_holds_at_the_run(vendors):
    model = _relu_then_sigmoid()
    artifact = byoc.compile(model, vendors=vendors)
    x = byoc.host.hand_over.aligned_zeros((1, 8, 6, 6), np.float32, artifact.input_alignment)
    assert x.ctypes.data % artifact.input_alignment == 0
    tensors = artifact.bind({"x": x})
    for seed in range(3):  # the same tensors, new values written in place before each run
        x[...] = np.random.default_rng(seed).standard_normal(x.shape).astype(np.float32)
        (y,) = artifact.run_bound(tensors)
        np.testing.assert_allclose(y, onnxruntime_outputs(model, {"x": x.copy()})[0], rtol=1e-5, atol=1e-6)


def test_an_input_a_bound_run_could_not_read_in_place_is_refused_by_name():
    artifact = byoc.compile(_relu_then_sigmoid(), vendors=[])
    with pytest.raises(byoc.InputError, match="'x' cannot be bound"):
        artifact.bind({"x": _at_offset((1, 8, 6, 6), offset=4)})  # the host's functions need 64 bytes: a copy
    with pytest.raises(byoc.InputError, match="'x' cannot be bound"):
        artifact.bind({"x": np.zeros((1, 8, 6, 6, 2), np.float32)[..., 0]})  # not contiguous: a copy
    with pytest.raises(byoc.InputDtypeError):
        artifact.bind({"x": np.zeros((1, 8, 6, 6), np.float64)})  # what run refuses, bind refuses
