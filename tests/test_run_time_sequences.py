"""Sequences whose length only the run tells (byoc/pipeline/frontend/run_time_sequences.py, byoc/host/sequences.py),
against onnxruntime: sequence inputs and outputs given and returned as lists, a split by a size given at run time,
SequenceMap and a Loop that appends to a sequence (their bodies partitioned for dnnl), positions given at run time,
an If that leaves an Optional empty or not, and opset 8's Scan; bad positions and inputs are typed errors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import byoc
from byoc.errors import InputDtypeError, InputError, UnsupportedTypeError
from models import onnxruntime_outputs

FLOAT_SEQ = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, None))


def _model(nodes, inputs, outputs, opset: int = 17) -> onnx.ModelProto:
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _seq(name: str, elem=TensorProto.FLOAT, shape=None) -> onnx.ValueInfoProto:
    return helper.make_value_info(name, helper.make_sequence_type_proto(helper.make_tensor_type_proto(elem, shape)))


def _assert_same(got, want, tol: float = 1e-5) -> None:
    """Outputs equal onnxruntime's: a sequence as a list of as many tensors, each within ``tol``."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, list) or w is None:
            assert (g is None) == (w is None)
            if w is None:
                continue
            assert isinstance(g, list) and len(g) == len(w)
            for gg, ww in zip(g, w):
                assert gg.shape == ww.shape and gg.dtype == ww.dtype
                np.testing.assert_allclose(gg, ww, rtol=tol, atol=tol)
        else:
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _split_model(split_rank: int = 0) -> onnx.ModelProto:
    """SplitToSequence of x by a split given at run time (a chunk size, or sizes: ``split_rank`` 1), each piece doubled by SequenceMap, the pieces joined
    again (ConcatFromSequence) and returned beside the sequence."""
    doubled = helper.make_graph([helper.make_node("Add", ["piece", "piece"], ["twice"])], "body",
                                [helper.make_tensor_value_info("piece", TensorProto.FLOAT, [2, "k"])],
                                [helper.make_tensor_value_info("twice", TensorProto.FLOAT, [2, "k"])])
    nodes = [helper.make_node("SplitToSequence", ["x", "split"], ["pieces"], name="split", axis=1),
             helper.make_node("SequenceMap", ["pieces"], ["doubled"], name="map", body=doubled),
             helper.make_node("ConcatFromSequence", ["doubled"], ["joined"], name="join", axis=1)]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "n"]),
                          helper.make_tensor_value_info("split", TensorProto.INT64, ["parts"][:split_rank])],
                  [_seq("doubled"), helper.make_tensor_value_info("joined", TensorProto.FLOAT, [2, "n"])])


@pytest.mark.parametrize("n, split", [(6, np.array(2)), (7, np.array(3)), (5, np.array([1, 4])), (4, np.array(4))],
                         ids=["even", "last-smaller", "sizes", "one"])
def test_a_split_by_a_run_time_size_matches_onnxruntime(n, split):
    model = _split_model(split.ndim)
    artifact = byoc.compile(model, vendors=["dnnl"])
    feeds = {"x": _rand(2, n), "split": split}
    _assert_same(artifact.run(feeds), onnxruntime_outputs(model, feeds))


def test_a_split_that_does_not_add_up_is_an_input_error():
    artifact = byoc.compile(_split_model(1), vendors=["dnnl"])
    with pytest.raises(InputError, match=r"SplitToSequence: split \[1, 2\] does not add up to the axis' 6"):
        artifact.run({"x": _rand(2, 6), "split": np.array([1, 2])})


def _map_model() -> onnx.ModelProto:
    """SequenceMap of a Linear and Relu over a sequence input (each tensor [rows, 8], rows its own), with a
    tensor every step reads."""
    body = helper.make_graph(
        [helper.make_node("MatMul", ["row", "weight"], ["product"]),
         helper.make_node("Add", ["product", "bias"], ["biased"]),
         helper.make_node("Relu", ["biased"], ["out"])], "body",
        [helper.make_tensor_value_info("row", TensorProto.FLOAT, ["r", 8]),
         helper.make_tensor_value_info("bias", TensorProto.FLOAT, [16])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["r", 16])],
        [onnx.numpy_helper.from_array(_rand(8, 16, seed=1), "weight")])
    return _model([helper.make_node("SequenceMap", ["rows", "bias"], ["outs"], name="map", body=body)],
                  [_seq("rows", shape=["r", 8]), helper.make_tensor_value_info("bias", TensorProto.FLOAT, [16])],
                  [_seq("outs", shape=["r", 16])])


def test_sequence_map_runs_its_body_on_dnnl_over_any_length():
    model = _map_model()
    plan = byoc.partition(model, ["dnnl"])
    body_vendors = {p.vendor for body in plan.loops.values() for p in body.partitions}
    assert body_vendors == {"dnnl"}
    artifact = byoc.build(plan)
    for lengths in ([3], [1, 4, 2], [], [5, 5]):
        feeds = {"rows": [_rand(r, 8, seed=r) for r in lengths], "bias": _rand(16, seed=9)}
        got = artifact.run(feeds)
        assert isinstance(got[0], list) and len(got[0]) == len(lengths)
        if lengths:  # onnxruntime's python API cannot take an empty list of unknown type
            _assert_same(got, onnxruntime_outputs(model, feeds))


def _append_loop_model() -> onnx.ModelProto:
    """A loop (its count given at run time) that appends a conv of its input scaled by the iteration to a sequence
    that starts empty, as TorchScript writes a list filled in a loop; the sequence stacked after."""
    step = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["i_float"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["x", "i_float"], ["scaled"]),
         helper.make_node("Conv", ["scaled", "w"], ["conv"], pads=[1, 1, 1, 1]),
         helper.make_node("SequenceInsert", ["acc_in", "conv"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])], "step",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), _seq("acc_in", shape=[1, 4, 5, 5])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), _seq("acc_out", shape=[1, 4, 5, 5])])
    nodes = [helper.make_node("SequenceEmpty", [], ["empty"], name="empty", dtype=TensorProto.FLOAT),
             helper.make_node("Loop", ["count", "", "empty"], ["convs"], name="loop", body=step),
             helper.make_node("ConcatFromSequence", ["convs"], ["stacked"], name="stack", axis=0, new_axis=1)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 5]),
                           helper.make_tensor_value_info("count", TensorProto.INT64, [])],
                   [_seq("convs", shape=[1, 4, 5, 5]),
                    helper.make_tensor_value_info("stacked", TensorProto.FLOAT, ["count", 1, 4, 5, 5])])
    model.graph.initializer.append(onnx.numpy_helper.from_array(_rand(4, 3, 3, 3, seed=2), "w"))
    return model


def test_a_loop_appending_convs_to_a_sequence_matches_onnxruntime():
    model = _append_loop_model()
    plan = byoc.partition(model, ["dnnl"])
    assert {p.vendor for body in plan.loops.values() for p in body.partitions} == {"dnnl"}
    artifact = byoc.build(plan)
    for count in (3, 1):
        feeds = {"x": _rand(1, 3, 5, 5, seed=count), "count": np.array(count, np.int64)}
        _assert_same(artifact.run(feeds), onnxruntime_outputs(model, feeds))


def _positions_model() -> onnx.ModelProto:
    """A sequence input's tensor at a position given at run time, the sequence with a tensor inserted at another and
    one erased at a third, and its length."""
    scalar = [helper.make_tensor_value_info(name, TensorProto.INT64, []) for name in ("at", "insert_at", "erase_at")]
    nodes = [helper.make_node("SequenceAt", ["seq", "at"], ["picked"], name="pick"),
             helper.make_node("SequenceInsert", ["seq", "extra", "insert_at"], ["inserted"], name="insert"),
             helper.make_node("SequenceErase", ["inserted", "erase_at"], ["erased"], name="erase"),
             helper.make_node("SequenceLength", ["erased"], ["length"], name="length"),
             helper.make_node("Relu", ["picked"], ["relu"], name="relu")]
    return _model(nodes, [_seq("seq", shape=["d"]), helper.make_tensor_value_info("extra", TensorProto.FLOAT, ["e"]),
                          *scalar],
                  [helper.make_tensor_value_info("relu", TensorProto.FLOAT, ["d"]), _seq("erased"),
                   helper.make_tensor_value_info("length", TensorProto.INT64, [])])


@pytest.mark.parametrize("at, insert_at, erase_at", [(0, 0, 1), (-1, 3, -1), (2, -2, 0)])
def test_positions_given_at_run_time_match_onnxruntime(at, insert_at, erase_at):
    model = _positions_model()
    feeds = {"seq": [_rand(4, seed=1), _rand(2, seed=2), _rand(3, seed=3)], "extra": _rand(5, seed=4),
             "at": np.array(at), "insert_at": np.array(insert_at), "erase_at": np.array(erase_at)}
    _assert_same(byoc.compile(model, vendors=["dnnl"]).run(feeds), onnxruntime_outputs(model, feeds))


def test_a_position_out_of_range_is_an_input_error_naming_the_op():
    artifact = byoc.compile(_positions_model(), vendors=["dnnl"])
    feeds = {"seq": [_rand(4), _rand(2)], "extra": _rand(5), "at": np.array(2), "insert_at": np.array(0),
             "erase_at": np.array(0)}
    with pytest.raises(InputError, match=r"SequenceAt: position 2 is outside \[-2, 1\] for a sequence of 2"):
        artifact.run(feeds)


def test_sequence_inputs_are_checked_by_name():
    artifact = byoc.compile(_positions_model(), vendors=["dnnl"])
    feeds = {"seq": _rand(4), "extra": _rand(5), "at": np.array(0), "insert_at": np.array(0),
             "erase_at": np.array(0)}
    with pytest.raises(InputError, match=r"input 'seq' is a sequence \(sequence\(float32\[d\]\)\): give a list"):
        artifact.run(feeds)
    feeds["seq"] = [_rand(4), np.zeros(3, np.int64)]
    with pytest.raises(InputDtypeError, match=r"input 'seq', element 1, has dtype int64, expected float32"):
        artifact.run(feeds)
    assert artifact.inputs[0].sequence and artifact.inputs[0].describe() == "sequence(float32[d])"
    with pytest.raises(InputError, match="cannot be bound"):
        artifact.bind({**feeds, "seq": [_rand(4)]})


def _optional_if_model() -> onnx.ModelProto:
    """An If whose then branch leaves an Optional sequence empty and whose else branch gives one of x."""
    optional = helper.make_optional_type_proto(FLOAT_SEQ)
    then = helper.make_graph([helper.make_node("Optional", [], ["none"], type=FLOAT_SEQ)], "then", [],
                             [helper.make_value_info("none", optional)])
    other = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]),
                               helper.make_node("SequenceConstruct", ["r", "x"], ["both"]),
                               helper.make_node("Optional", ["both"], ["some"])], "else", [],
                              [helper.make_value_info("some", optional)])
    return _model([helper.make_node("If", ["cond"], ["maybe"], name="if", then_branch=then, else_branch=other)],
                  [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                   helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                  [helper.make_value_info("maybe", optional)])


def test_an_if_leaving_an_optional_empty_or_not_matches_onnxruntime():
    model = _optional_if_model()
    artifact = byoc.compile(model, vendors=["dnnl"])
    for cond in (True, False):
        feeds = {"cond": np.array(cond), "x": _rand(3)}
        _assert_same(artifact.run(feeds), onnxruntime_outputs(model, feeds))


def test_a_scan_at_opset_8_unrolls_per_batch_entry():
    """Opset 8's Scan (a batch axis the body does not see): a running sum and its steps over a batch of 2."""
    body = helper.make_graph(
        [helper.make_node("Add", ["sum_in", "step"], ["sum_out"]),
         helper.make_node("Mul", ["sum_out", "sum_out"], ["squared"])], "body",
        [helper.make_tensor_value_info("sum_in", TensorProto.FLOAT, [4]),
         helper.make_tensor_value_info("step", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("sum_out", TensorProto.FLOAT, [4]),
         helper.make_tensor_value_info("squared", TensorProto.FLOAT, [4])])
    model = _model([helper.make_node("Scan", ["", "initial", "xs"], ["total", "squares"], name="scan",
                                     num_scan_inputs=1, directions=[1], body=body)],
                   [helper.make_tensor_value_info("initial", TensorProto.FLOAT, [2, 4]),
                    helper.make_tensor_value_info("xs", TensorProto.FLOAT, [2, 3, 4])],
                   [helper.make_tensor_value_info("total", TensorProto.FLOAT, [2, 4]),
                    helper.make_tensor_value_info("squares", TensorProto.FLOAT, [2, 3, 4])], opset=8)
    feeds = {"initial": _rand(2, 4, seed=1), "xs": _rand(2, 3, 4, seed=2)}
    _assert_same(byoc.compile(model, vendors=["dnnl"]).run(feeds), onnxruntime_outputs(model, feeds))


def test_a_map_input_is_still_refused_by_name():
    map_type = helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, []))
    model = _model([helper.make_node("Identity", ["m"], ["y"])], [helper.make_value_info("m", map_type)],
                   [helper.make_value_info("y", map_type)])
    with pytest.raises(UnsupportedTypeError, match=r"neither tensors nor sequences of tensors: m \(map\), y \(map\)"):
        byoc.compile(model, vendors=["dnnl"])


def test_verify_gives_a_sequence_model_random_lists(tmp_path):
    from byoc.tools.verify import verify

    result = verify(byoc.partition(_map_model(), ["dnnl"]))
    assert result.status == "ok", result.lines
    assert [c.name for c in result.outputs] == ["outs[0]", "outs[1]"]


def test_a_standalone_program_is_refused_by_name():
    from byoc.errors import StandaloneError

    artifact = byoc.compile(_positions_model(), vendors=["dnnl"])
    with pytest.raises(StandaloneError, match=r"sequences whose length is known only when it runs \('seq', 'erased'\)"):
        artifact.export_standalone("/nonexistent/never-written", dims={"e": 2})


def test_an_optional_sequence_input_may_be_none_and_reading_an_empty_optional_is_refused():
    optional = helper.make_optional_type_proto(FLOAT_SEQ)
    model = _model([helper.make_node("OptionalHasElement", ["maybe"], ["has"], name="has"),
                    helper.make_node("Identity", ["maybe"], ["same"], name="same")],
                   [helper.make_value_info("maybe", optional)],
                   [helper.make_tensor_value_info("has", TensorProto.BOOL, []), helper.make_value_info("same", optional)])
    artifact = byoc.compile(model, vendors=["dnnl"])
    has, same = artifact.run({"maybe": None})
    assert not has and same is None
    has, same = artifact.run({"maybe": [_rand(2)]})
    assert has and len(same) == 1
    empty = _model([helper.make_node("Optional", [], ["none"], name="none", type=FLOAT_SEQ),
                    helper.make_node("OptionalGetElement", ["none"], ["got"], name="get")], [],
                   [_seq("got")])
    with pytest.raises(byoc.UnsupportedAttributeError, match="OptionalGetElement node 'get' reads an Optional that "
                                                             "is always empty"):
        byoc.compile(empty, vendors=["dnnl"])


def test_an_optional_tensor_input_given_none_is_an_input_error_naming_it():
    """An optional tensor input is taken as the tensor: None for it is refused by name, not as "dtype object"."""
    optional = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [3]))
    model = _model([helper.make_node("OptionalGetElement", ["maybe"], ["got"], name="get")],
                   [helper.make_value_info("maybe", optional)],
                   [helper.make_tensor_value_info("got", TensorProto.FLOAT, [3])], opset=18)
    artifact = byoc.compile(model, vendors=["dnnl"])
    np.testing.assert_array_equal(artifact.run({"maybe": np.arange(3, dtype=np.float32)})[0], np.arange(3))
    with pytest.raises(InputError, match=r"input 'maybe' is None: an optional tensor input of this model must hold"):
        artifact.run({"maybe": None})
