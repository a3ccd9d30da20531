"""Hostile inputs: every one is a typed byoc error with a clear message, no crash, no stray file.

Also: node and tensor names full of C and JSON metacharacters reach both
codegens safely (the code compiles and the model matches onnxruntime).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import byoc
from byoc.errors import ByocError, ExternalDataError, InputError, InvalidModelError, ModelLoadError

from models import const, onnxruntime_outputs, rng, small_cnn, tensor

TESTS = Path(__file__).resolve().parent


def _model(nodes, inputs, outputs, initializers=()):
    """Like models.model, but without onnx.checker (these models are meant to be bad)."""
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """An empty working folder; the test checks that nothing but what it expects appears."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def _refused(source, error=ModelLoadError, match=None, **kwargs):
    """Compile ``source`` for both codegens and expect ``error``; return its message."""
    with pytest.raises(error, match=match) as info:
        byoc.compile(source, vendors=["c_source", "json_runtime"], **kwargs)
    assert isinstance(info.value, ByocError)
    message = str(info.value)
    assert message and "\n" not in message.strip() or len(message) < 2000
    return message


# -- broken files --------------------------------------------------------------------
def _file_cases():
    good = small_cnn().SerializeToString()
    return {
        "zero_bytes": b"",
        "truncated": good[: len(good) // 2],
        "truncated_tail": good[:-7],
        "corrupt_middle": good[:40] + bytes(range(256)) + good[296:],
        "random_bytes": rng(5).integers(0, 256, 4096, dtype=np.uint8).tobytes(),
        "text_file": b"this is not a model\n",
    }


@pytest.mark.parametrize("label", sorted(_file_cases()))
def test_broken_file_is_refused_and_nothing_is_written(label, sandbox):
    path = sandbox / f"{label}.onnx"
    path.write_bytes(_file_cases()[label])
    before = _listing(sandbox)
    message = _refused(path)
    assert str(path) in message or "model" in message
    assert _listing(sandbox) == before


def test_the_same_bytes_are_refused_in_memory():
    for data in _file_cases().values():
        with pytest.raises(ModelLoadError):
            byoc.import_model(data)


# -- graphs -------------------------------------------------------------------------
def test_cycle_names_its_nodes():
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="first"),
        helper.make_node("Relu", ["a"], ["b"], name="second"),
        helper.make_node("Relu", ["a"], ["y"], name="out"),
    ]
    message = _refused(_model(nodes, [tensor("x", [2, 3])], [tensor("y", [2, 3])]), InvalidModelError, "cycle")
    assert "'first'" in message and "'second'" in message


def test_self_loop_is_a_cycle():
    nodes = [helper.make_node("Add", ["x", "y"], ["y"], name="loop")]
    _refused(_model(nodes, [tensor("x", [2])], [tensor("y", [2])]), InvalidModelError, "cycle.*'loop'")


def test_unsorted_acyclic_graph_is_accepted():
    """Nodes listed out of order but acyclic run like onnxruntime runs them."""
    nodes = [
        helper.make_node("Relu", ["a"], ["y"], name="second"),
        helper.make_node("Add", ["x", "x"], ["a"], name="first"),
    ]
    m = _model(nodes, [tensor("x", [2, 3])], [tensor("y", [2, 3])])
    x = rng(1).standard_normal((2, 3)).astype(np.float32)
    out = byoc.compile(m, vendors=["c_source"]).run({"x": x})
    np.testing.assert_allclose(out[0], np.maximum(x + x, 0), rtol=1e-6)


_W = const("w", np.ones((4, 3, 3, 3), np.float32))

ABSURD = {
    "conv_kernel_0": ("Conv", {"kernel_shape": [0, 0]}, [const("w", np.ones((4, 3, 1, 1), np.float32))]),
    "conv_negative_pads": ("Conv", {"kernel_shape": [3, 3], "pads": [-5, -5, -5, -5]}, [_W]),
    "conv_stride_0": ("Conv", {"kernel_shape": [3, 3], "strides": [0, 0]}, [_W]),
    "conv_dilation_negative": ("Conv", {"kernel_shape": [3, 3], "dilations": [-1, -1]}, [_W]),
    "maxpool_kernel_0": ("MaxPool", {"kernel_shape": [0, 0]}, []),
    "maxpool_negative_pads": ("MaxPool", {"kernel_shape": [2, 2], "pads": [-1, -1, -1, -1]}, []),
    "avgpool_kernel_larger_than_input": ("AveragePool", {"kernel_shape": [99, 99]}, []),
    "softmax_axis_out_of_range": ("Softmax", {"axis": 7}, []),
    "transpose_bad_perm": ("Transpose", {"perm": [0, 0, 1, 2]}, []),
}


@pytest.mark.parametrize("label", sorted(ABSURD))
def test_absurd_attribute_is_refused(label, sandbox):
    op, attrs, weights = ABSURD[label]
    node = helper.make_node(op, ["x"] + [w.name for w in weights], ["y"], name=label, **attrs)
    m = _model([node], [tensor("x", [1, 3, 8, 8])], [tensor("y", [1, 4, 8, 8])], weights)
    message = _refused(m, ModelLoadError)
    assert label in message or op in message or "attribute" in message.lower() or "shape" in message.lower()
    assert _listing(sandbox) == []


# -- external data ------------------------------------------------------------------
def _external(location: str) -> onnx.ModelProto:
    weight = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2])
    weight.data_location = onnx.TensorProto.EXTERNAL
    weight.external_data.add(key="location", value=location)
    node = helper.make_node("Add", ["x", "w"], ["y"], name="add")
    return _model([node], [tensor("x", [2])], [tensor("y", [2])], [weight])


@pytest.mark.parametrize("location", ["../secret.bin", "sub/../../secret.bin", "/etc/passwd",
                                      "SECRET_ABSOLUTE"])
def test_external_data_outside_the_model_folder_is_refused(location, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.array([1, 2], np.float32).tobytes())
    if location == "SECRET_ABSOLUTE":
        location = str(secret)
    path = folder / "m.onnx"
    path.write_bytes(_external(location).SerializeToString())
    before = _listing(tmp_path)
    message = _refused(path, ExternalDataError, "refused")
    assert location in message
    assert _listing(tmp_path) == before


def test_external_data_inside_the_folder_works(tmp_path):
    (tmp_path / "w.bin").write_bytes(np.array([1, 2], np.float32).tobytes())
    path = tmp_path / "m.onnx"
    path.write_bytes(_external("w.bin").SerializeToString())
    out = byoc.compile(path).run({"x": np.zeros(2, np.float32)})
    np.testing.assert_array_equal(out[0], [1, 2])


# -- sizes -------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [[2**31, 1], [1 << 20, 1 << 20], [1, 3, 65536, 65536]])
def test_two_gigabyte_dimension_is_refused(shape):
    node = helper.make_node("Relu", ["x"], ["y"], name="relu")
    m = _model([node], [tensor("x", shape)], [tensor("y", shape)])
    _refused(m, InvalidModelError, "2 GiB")


def test_huge_initializer_without_data_is_refused():
    weight = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2**31])
    node = helper.make_node("ReduceSum", ["w"], ["y"], name="sum", keepdims=0)
    _refused(_model([node], [], [tensor("y", [])], [weight]), ModelLoadError)


def test_huge_input_shape_override_is_refused():
    node = helper.make_node("Relu", ["x"], ["y"], name="relu")
    m = _model([node], [tensor("x", ["n", 4])], [tensor("y", ["n", 4])])
    _refused(m, InvalidModelError, "2 GiB", input_shapes={"x": [2**40, 4]})


# -- run time ---------------------------------------------------------------------
@pytest.fixture(scope="module", params=["c_source", "json_runtime"])
def artifact(request):
    return byoc.compile(small_cnn(), vendors=[request.param])


@pytest.mark.parametrize("bad", ["shape", "rank", "dtype", "too_many", "too_few", "unknown_name",
                                 "missing_name", "object"])
def test_wrong_run_time_inputs(artifact, bad):
    spec = artifact.inputs[0]
    good = np.zeros(spec.shape, np.float32)
    inputs = {
        "shape": {spec.name: np.zeros((1,) + spec.shape[1:-1] + (spec.shape[-1] + 1,), np.float32)},
        "rank": {spec.name: good.reshape(-1)},
        "dtype": {spec.name: good.astype(np.float64)},
        "too_many": [good, good],
        "too_few": [],
        "unknown_name": {spec.name: good, "other": good},
        "missing_name": {"other": good},
        "object": {spec.name: np.array([object()] * good.size, dtype=object)},
    }[bad]
    with pytest.raises(InputError) as info:
        artifact.run(inputs)
    assert spec.name in str(info.value) or "input" in str(info.value)
    assert artifact.run({spec.name: good})[0].shape == tuple(artifact.outputs[0].shape)


def test_strided_views_are_run_as_their_values(artifact):
    """A strided or reversed view is copied before the run, not read as if it were contiguous."""
    spec = artifact.inputs[0]
    x = rng(7).standard_normal(spec.shape).astype(np.float32)
    expected = onnxruntime_outputs(small_cnn(), {spec.name: x})[0]
    wide = np.zeros(spec.shape[:-1] + (2 * spec.shape[-1],), np.float32)
    wide[..., ::2] = x
    reversed_twice = np.ascontiguousarray(x[..., ::-1])[..., ::-1]
    for view in (wide[..., ::2], reversed_twice):
        assert not view.flags.c_contiguous
        np.testing.assert_allclose(artifact.run({spec.name: view})[0], expected, rtol=1e-4, atol=1e-5)


def test_export_writes_only_the_requested_file(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    art = byoc.compile(small_cnn(), vendors=["c_source", "json_runtime"])
    art.export(out / "model.so")
    assert _listing(out) == ["model.so"]
    with pytest.raises(ByocError, match="exists"):
        art.export(out / "model.so")
    with pytest.raises(ByocError, match="does not exist"):
        art.export(out / "missing" / "model.so")
    assert _listing(out) == ["model.so"]


# -- names that are hostile to generated code -----------------------------------------
NASTY = [
    'q"uote\'s',
    "back\\slash\\",
    "new\nline\r\n",
    "*/ int evil = 1; /*",
    "#include <stdio.h>\n#define x y",
    "ünïcødé_名前_🙂",
    '"}],"nodes":[{"op":"evil"}]',
    "%s%n{}",
]


def _nasty_model() -> onnx.ModelProto:
    """A small CNN whose every node and tensor name is hostile."""
    r = rng(11)
    names = [f"{n}{i}" for i, n in enumerate(NASTY * 2)]
    x, y = names[0], names[1]
    w, b, t1, t2, t3, w2 = names[2:8]
    nodes = [
        helper.make_node("Conv", [x, w, b], [t1], name=names[8], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", [t1], [t2], name=names[9]),
        helper.make_node("MaxPool", [t2], [t3], name=names[10], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", [t3], [names[11]], name=names[12]),
        helper.make_node("MatMul", [names[11], w2], [names[13]], name=names[14]),
        helper.make_node("Sigmoid", [names[13]], [y], name=names[15]),
    ]
    inits = [
        const(w, r.standard_normal((4, 3, 3, 3)).astype(np.float32)),
        const(b, r.standard_normal(4).astype(np.float32)),
        const(w2, r.standard_normal((64, 5)).astype(np.float32)),
    ]
    m = _model(nodes, [tensor(x, [1, 3, 8, 8])], [tensor(y, [1, 5])], inits)
    onnx.checker.check_model(m)
    return m


@pytest.mark.parametrize("vendor", ["c_source", "json_runtime"])
def test_hostile_names_reach_the_codegens_safely(vendor, tmp_path):
    m = _nasty_model()
    x = rng(12).standard_normal((1, 3, 8, 8)).astype(np.float32)
    feeds = {m.graph.input[0].name: x}
    art = byoc.compile(m, vendors=[vendor], strict=True)  # strict: the generated code must compile
    assert len(art.plan.partitions) >= 1
    expected = onnxruntime_outputs(m, feeds)
    np.testing.assert_allclose(art.run(feeds)[0], expected[0], rtol=1e-4, atol=1e-5)
    # and it survives export and a load in a fresh process
    path = art.export(tmp_path / "nasty.so")
    np.save(tmp_path / "x.npy", x)
    script = (
        "import sys, numpy as np, byoc\n"
        "a = byoc.load(sys.argv[1])\n"
        "np.save(sys.argv[3], a.run([np.load(sys.argv[2])])[0])\n"
    )
    subprocess.run([sys.executable, "-c", script, str(path), str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                   check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(TESTS)})
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), expected[0], rtol=1e-4, atol=1e-5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nasty.so", "x.npy", "y.npy"]


# -- artifacts byoc.load cannot load here -------------------------------------------------
@pytest.fixture(scope="module")
def exported_so(tmp_path_factory):
    """An x86_64 artifact's bytes (exported from the small CNN), for the tests to rewrite its ELF header."""
    from byoc.deploy.targets import host_name

    if host_name() != "x86_64":
        pytest.skip("the crafted headers start from an x86_64 library")
    folder = tmp_path_factory.mktemp("exported")
    return byoc.compile(small_cnn(), vendors=["c_source"]).export(folder / "model.so").read_bytes()


def _with_elf_header(data: bytes, byte_order: str, e_type: int, machine: int) -> bytes:
    """``data`` with EI_DATA, e_type and e_machine (offsets 5, 16, 18) rewritten, the last two in ``byte_order``."""
    head = bytearray(data)
    head[5] = 1 if byte_order == "little" else 2
    head[16:18] = e_type.to_bytes(2, byte_order)
    head[18:20] = machine.to_bytes(2, byte_order)
    return bytes(head)


@pytest.mark.parametrize("target, byte_order, machine", [("s390x", "big", 22), ("ppc64le", "little", 21)])
def test_an_artifact_for_another_machine_names_its_target(exported_so, tmp_path, target, byte_order, machine):
    """The dynamic loader says "cannot open shared object file: No such file or directory" for a file
    that exists; byoc.load reads the ELF header first and says what it was built for and how to run it."""
    from byoc.errors import ArtifactLoadError, TargetError

    path = tmp_path / f"model-{target}.so"
    path.write_bytes(_with_elf_header(exported_so, byte_order, 3, machine))
    with pytest.raises(TargetError) as info:
        byoc.load(path)
    message = str(info.value)
    assert isinstance(info.value, ArtifactLoadError)  # what byoc.load raised for it before
    assert info.value.target == target
    assert f"was built for {target} (ELF machine {machine}, {byte_order}-endian), not for this x86_64 machine" \
        in message
    for hint in (f"target={target!r}", "run_emulated(inputs)", "export_standalone(folder)", f"qemu-{target}"):
        assert hint in message, hint
    assert "No such file" not in message and "\n" not in message


def test_an_artifact_for_a_machine_byoc_has_no_preset_for(exported_so, tmp_path):
    from byoc.errors import TargetError

    path = tmp_path / "model-aarch64.so"
    path.write_bytes(_with_elf_header(exported_so, "little", 3, 183))
    with pytest.raises(TargetError, match=r"is a shared library for aarch64 \(ELF machine 183, 64-bit "
                                          r"little-endian\), not for this x86_64 machine"):
        byoc.load(path)


@pytest.mark.parametrize("kind", ["text", "empty", "object_file", "cut_short"])
def test_a_file_that_is_not_a_shared_library_is_named(exported_so, tmp_path, kind):
    from byoc.errors import ArtifactLoadError

    data, expected = {
        "text": (b"hello\n", "is a text file, not a shared library; byoc.load expects the .so"),
        "empty": (b"", "is empty; byoc.load expects the .so"),
        "object_file": (_with_elf_header(exported_so, "little", 1, 62), "is an ELF object file (.o), not a shared"),
        "cut_short": (exported_so[:12], "starts like an ELF file but its header is cut short or corrupt"),
    }[kind]
    path = tmp_path / "model.so"
    path.write_bytes(data)
    with pytest.raises(ArtifactLoadError) as info:
        byoc.load(path)
    assert expected in str(info.value)


def test_a_cross_built_s390x_artifact_names_its_target(tmp_path):
    """The same with a real s390x library (needs the cross compiler: installed with apt-get, as test_cross does)."""
    from byoc.deploy import toolchain
    from byoc.deploy.targets import host_name
    from byoc.errors import TargetError

    if host_name() == "s390x":
        pytest.skip("s390x is this machine")
    try:
        toolchain.install_missing("s390x")
    except toolchain.AptUnavailable as err:
        pytest.skip(f"the s390x toolchain is missing and cannot be installed: {err}")
    path = byoc.compile(small_cnn(), vendors=["c_source"], target="s390x").export(tmp_path / "model-s390x.so")
    with pytest.raises(TargetError, match=r"was built for s390x .* run_emulated\(inputs\)"):
        byoc.load(path)


def _embedding(ids_of_input: bool = True) -> onnx.ModelProto:
    """Token ids [batch, seq] (int64) -> Gather from a 10 x 4 table -> Relu; the ids come straight from the
    input, or through an Add of 0 (computed indices)."""
    table = np.arange(40, dtype=np.float32).reshape(10, 4) - 20
    nodes = [] if ids_of_input else [helper.make_node("Add", ["ids", "zero"], ["idx"], name="shift")]
    nodes += [helper.make_node("Gather", ["table", "ids" if ids_of_input else "idx"], ["e"], name="embed", axis=0),
              helper.make_node("Relu", ["e"], ["y"], name="relu")]
    inits = [const("table", table), const("zero", np.zeros((), np.int64))]
    graph = helper.make_graph(nodes, "embedding", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["b", "s"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "s", 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("vendors", [[], ["dnnl"]])
def test_a_token_id_past_the_vocabulary_is_an_input_error_not_a_segfault(vendors):
    """onnxruntime refuses an index outside the Gather's axis; byoc's host took it in TVM's "fast" mode, which read
    out of bounds (a BERT run segfaulted). In-range ids, negative ones included, match onnxruntime."""
    model = _embedding()
    artifact = byoc.compile(model, vendors)
    ids = np.array([[0, 9, -1, -10]], np.int64)
    np.testing.assert_array_equal(artifact.run({"ids": ids})[0], onnxruntime_outputs(model, {"ids": ids})[0])
    for bad, where in ((10, "(0, 2)"), (-11, "(0, 2)"), (10**9, "(0, 2)")):
        ids = np.array([[1, 2, bad, 3]], np.int64)
        with pytest.raises(InputError, match=rf"'ids' has {bad} at {re.escape(where)}, outside the range \[-10, 9\] "
                                             r"of the Gather 'embed'"):
            artifact.run({"ids": ids})


def test_computed_indices_out_of_range_stay_in_bounds():
    """Indices the model computes cannot be checked before the run: the host's take clips them, so the run reads
    inside the table (no crash) and in-range ones are exact."""
    model = _embedding(ids_of_input=False)
    artifact = byoc.compile(model, [])
    ids = np.array([[0, 9, -1, -10]], np.int64)
    np.testing.assert_array_equal(artifact.run({"ids": ids})[0], onnxruntime_outputs(model, {"ids": ids})[0])
    out = artifact.run({"ids": np.array([[10**9, -(10**9)]], np.int64)})[0]
    assert out.shape == (1, 2, 4) and np.isfinite(out).all()
