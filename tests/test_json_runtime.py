"""The json_runtime vendor: every op against onnxruntime, export/load in a fresh process,
determinism of the JSON, concurrency, corrupted blobs, and the installed library.

Run with ``-s`` to see the largest absolute error against onnxruntime.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import struct
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

import byoc
from byoc.codegens.json_runtime import JsonRuntimeCodegen, serialize
from byoc.vendor.graph import partition_graph

from models import const, model, onnxruntime_outputs, random_inputs, rng, single_op, small_cnn, small_mlp, tensor

RTOL, ATOL = 1e-4, 1e-5
TESTS = Path(__file__).resolve().parent
_max_error = [0.0, ""]


@pytest.fixture(scope="module", autouse=True)
def _report_max_error():
    yield
    print(f"\njson_runtime: largest absolute error vs onnxruntime = {_max_error[0]:.3g} ({_max_error[1]})")


def _compare(got, want, label):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
        error = float(np.max(np.abs(g - w))) if g.size else 0.0
        if error > _max_error[0]:
            _max_error[:] = [error, label]


def _f(*shape, seed=3):
    return rng(seed).standard_normal(shape).astype(np.float32)


def _check(m, rule=None, label="", host_ops=()):
    """Compile with json_runtime only, check every op but ``host_ops`` went there, compare with onnxruntime."""
    artifact = byoc.compile(m, vendors=["json_runtime"])
    plan = artifact.plan
    assert [d.op for d in plan.host_ops] == list(host_ops), [(d.op, d.reasons) for d in plan.host_ops]
    assert plan.partitions and all(p.vendor == "json_runtime" for p in plan.partitions)
    if rule is not None:
        assert f"json_runtime.{rule}" in {d.rule for d in plan.decisions.values()}
    inputs = random_inputs(m)
    _compare(artifact.run(inputs), onnxruntime_outputs(m, inputs), label or (rule or "model"))
    return artifact


# -- models ----------------------------------------------------------------------------------
# Every op and pattern runs through this runtime in tests/test_c_source.py (parametrized by vendor).
@pytest.mark.parametrize("build,host_ops", [(small_cnn, ["relax.nn.batch_norm"]), (small_mlp, [])],
                         ids=["cnn", "mlp"])
def test_small_models(build, host_ops):
    _check(build(), label=build.__name__, host_ops=host_ops)


# -- rejections come with reasons -----------------------------------------------------------
def test_rejections_have_reasons():
    m = single_op("AveragePool", {"x": [1, 2, 7, 7]}, [1, 2, 4, 4],
                  {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1})
    plan = byoc.partition(m, ["json_runtime"])
    assert [d.reasons["json_runtime"] for d in plan.host_ops] == ["ceil_mode=1 not supported for average pooling"]
    m64 = model([helper.make_node("Add", ["a", "b"], ["y"], name="add")],
                [tensor("a", [2], onnx.TensorProto.DOUBLE), tensor("b", [2], onnx.TensorProto.DOUBLE)],
                [tensor("y", [2], onnx.TensorProto.DOUBLE)])
    plan = byoc.partition(m64, ["json_runtime"])
    assert [d.reasons["json_runtime"] for d in plan.host_ops] == ["dtype float64 not supported (float32 only)"]
    assert all(r.name.startswith("json_runtime.") for r in byoc.get_vendor("json_runtime").rules)


# -- JSON ---------------------------------------------------------------------------------------
def _graphs(m, vendors=("json_runtime",)):
    plan = byoc.partition(m, list(vendors))
    return [partition_graph(plan.mod[p.global_var], p.name) for p in plan.partitions]


def test_json_schema():
    graph, = _graphs(small_mlp())
    doc = json.loads(serialize(graph).json)
    assert (doc["format"], doc["version"], doc["symbol"]) == ("byoc.json_runtime.graph", 2, "json_runtime_0")
    declared = {t["name"]: t for t in doc["tensors"]}
    assert doc["inputs"] == ["input0", "input1"] and declared["input0"]["shape"] == [4, 32]
    assert all(declared[n]["kind"] == "const" for n in doc["constants"])
    ops = [n["op"] for n in doc["nodes"]]
    assert ops[:3] == ["json_runtime.add", "json_runtime.matmul_bias", "json_runtime.relu"]
    fused = doc["nodes"][1]
    assert [b["kernel"] for b in fused["body"]] == ["relax.matmul", "relax.add"]
    assert fused["outputs"] == [fused["body"][-1]["output"]]
    softmax = doc["nodes"][-1]["body"][0]
    assert softmax["attrs"]["axis"] == {"type": "int", "value": -1}


def test_json_is_deterministic_in_and_across_processes():
    texts = [serialize(g).json for g in _graphs(small_cnn())]
    assert texts == [serialize(g).json for g in _graphs(small_cnn())]
    script = textwrap.dedent("""
        import hashlib, byoc
        from byoc.codegens.json_runtime import serialize
        from byoc.vendor.graph import partition_graph
        from models import small_cnn
        plan = byoc.partition(small_cnn(), ["json_runtime"])
        for p in plan.partitions:
            print(hashlib.sha256(serialize(partition_graph(plan.mod[p.global_var], p.name)).json.encode()).hexdigest())
    """)
    env = dict(os.environ, PYTHONPATH=str(TESTS), PYTHONHASHSEED="12345")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.split() == [hashlib.sha256(t.encode()).hexdigest() for t in texts]


def test_non_finite_attributes_stay_strict_json():
    graph, = _graphs(model([helper.make_node("Clip", ["x", "lo"], ["y"], name="clip")], [tensor("x", [3])],
                           [tensor("y", [3])], [const("lo", np.array(0.0, np.float32))]))
    text = serialize(graph).json
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert '"max":{"type":"float","value":"inf"}' in text


# -- the runtime module ----------------------------------------------------------------------
def _conv_module():
    m = model([helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
               helper.make_node("Relu", ["c"], ["y"], name="relu")],
              [tensor("x", [1, 3, 6, 6])], [tensor("y", [1, 4, 6, 6])],
              [const("w", _f(4, 3, 3, 3)), const("b", _f(4))])
    graph, = _graphs(m)
    module, = JsonRuntimeCodegen().compile([graph], {})
    return m, graph, module


def _save(module) -> bytes:
    import tvm_ffi

    return bytes(tvm_ffi.get_global_func("byoc.json_runtime.save_to_bytes")(module))


def _load(blob: bytes):
    import tvm_ffi

    return tvm_ffi.get_global_func("ffi.Module.load_from_bytes.byoc_json_runtime")(blob)


def _run_module(module, symbol, x):
    import tvm

    out = tvm.runtime.empty((1, 4, 6, 6), "float32")
    module[symbol](tvm.runtime.tensor(x), out)
    return out.numpy()


def test_blob_round_trip_keeps_weights_once():
    m, graph, module = _conv_module()
    blob = _save(module)
    assert blob[:8] == b"BYOCJSRT"
    weights = sum(t.size for t in graph.constants) * 4
    json_len = len(serialize(graph).json)
    # header + symbol + JSON + per-constant name/count + weights + checksum: weights appear once
    assert weights < len(blob) - json_len < weights + 200
    x = random_inputs(m)["x"]
    _compare([_run_module(_load(blob), graph.symbol, x)], onnxruntime_outputs(m, {"x": x}), "conv blob round trip")


def _fnv(data: bytes) -> bytes:
    h = 1469598103934665603
    for byte in data:
        h = ((h ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return struct.pack("<Q", h)


def _sealed(body: bytes) -> bytes:
    return body + _fnv(body)


def _weights_checksum(data: bytes) -> int:
    """codegens/graph_runtime/weights.h's WeightsChecksum, written again from its comment: four FNV-1a lanes
    over 8-byte little-endian words, then the tail bytes, folded with the length."""
    prime, mask = 1099511628211, 2**64 - 1
    lanes = [1469598103934665603, 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9]
    whole = len(data) // 32 * 32
    for row in np.frombuffer(data[:whole], "<u8").reshape(-1, 4):
        lanes = [((lane ^ int(word)) * prime) & mask for lane, word in zip(lanes, row)]
    h = lanes[0] ^ (lanes[1] * 3 & mask) ^ (lanes[2] * 5 & mask) ^ (lanes[3] * 7 & mask) ^ len(data)
    for byte in data[whole:]:
        h = ((h ^ byte) * prime) & mask
    return h


def _blob(symbol: str, text: str, consts: dict, version: int = 2, weights_symbol: str = "") -> bytes:
    """A module blob as codegens/graph_runtime/blob.h documents it: the constant table, then the weights (each
    constant at a multiple of 64 bytes, zeros between), in the blob unless ``weights_symbol`` names a section."""
    def s(b: bytes) -> bytes:
        return struct.pack("<Q", len(b)) + b

    weights, table = b"", b""
    for name, array in consts.items():
        flat = np.asarray(array, "<f4").reshape(-1)
        weights += b"\0" * (-len(weights) % 64)
        table += s(name.encode()) + struct.pack("<QQ", flat.size, len(weights))
        weights += flat.tobytes()
    body = b"BYOCJSRT" + struct.pack("<II", version, 0) + s(symbol.encode()) + s(text.encode())
    body += s(weights_symbol.encode()) + struct.pack("<QQ", len(weights), _weights_checksum(weights))
    body += struct.pack("<Q", len(consts)) + table + (b"" if weights_symbol else weights)
    return _sealed(body)


def test_blob_layout_is_fixed_little_endian():
    _, graph, module = _conv_module()
    ser = serialize(graph)
    assert _save(module) == _blob(graph.symbol, ser.json, {n: ser.constants[n] for n in sorted(ser.constants)})


def _mangled(blob: bytes):
    _, graph, _ = _conv_module()
    ser = serialize(graph)
    doc = json.loads(ser.json)
    consts = {n: ser.constants[n] for n in sorted(ser.constants)}
    bad_shape, bad_relu = json.loads(ser.json), json.loads(ser.json)
    conv_out, relu_out = bad_shape["nodes"][0]["body"][0]["output"], bad_shape["nodes"][0]["body"][-1]["output"]
    next(t for t in bad_shape["tensors"] if t["name"] == conv_out)["shape"] = [1, 4, 60, 6]
    next(t for t in bad_relu["tensors"] if t["name"] == relu_out)["shape"] = [1, 4, 60, 6]
    unknown_kernel = json.loads(ser.json)
    unknown_kernel["nodes"][0]["body"][0]["kernel"] = "relax.nn.gelu"
    missing_attr = json.loads(ser.json)
    del missing_attr["nodes"][0]["body"][0]["attrs"]["strides"]
    dangling = json.loads(ser.json)
    dangling["outputs"] = ["nowhere"]
    # A graph may compute a tensor per CPU feature (version 2); the reference runtime reports none, so the
    # conv marked for one is left out and the relu after it reads nothing; version 1 has no such marks.
    for_a_feature = json.loads(ser.json)
    for_a_feature["nodes"][0]["body"][0]["attrs"]["only_if_cpu"] = {"type": "str", "value": "vnni"}
    marked_in_v1 = json.loads(json.dumps(for_a_feature))
    marked_in_v1["version"] = 1
    flipped = bytearray(blob)
    flipped[len(flipped) // 2] ^= 0x40
    return {
        "empty": (b"", "bad magic or too short"),
        "truncated header": (blob[:20], "bad magic or too short"),
        "truncated body": (blob[: len(blob) // 2], "checksum mismatch"),
        "truncated tail": (blob[:-1], "checksum mismatch"),
        "flipped byte": (bytes(flipped), "checksum mismatch"),
        "bad magic": (b"NOTBYOC!" + blob[8:], "bad magic"),
        "future version": (_blob(graph.symbol, ser.json, consts, version=9), "blob version 9 is not supported"),
        "length past the end": (_sealed(b"BYOCJSRT" + struct.pack("<IIQ", 2, 0, 2**64 - 1) + b"x" * 8),
                                "needs 18446744073709551615 bytes but only 8 remain"),
        "impossible count": (_sealed(_blob(graph.symbol, ser.json, {})[:-16] + struct.pack("<Q", 2**40)),
                             "constant count 1099511627776 is impossible"),
        "json garbage": (_blob(graph.symbol, ser.json[:-7] + "}}]{", consts), "graph JSON does not parse"),
        "deep json": (_blob(graph.symbol, "[" * 100000 + "]" * 100000, consts), "nests deeper"),
        "json not an object": (_blob(graph.symbol, "[1, 2]", consts), "graph must be a JSON object"),
        "missing constant": (_blob(graph.symbol, ser.json, {}), "has no data"),
        "short constant": (_blob(graph.symbol, ser.json, {n: v.reshape(-1)[:-1] for n, v in consts.items()}), "values"),
        "wrong output shape": (_blob(graph.symbol, json.dumps(bad_shape), consts), "does not follow"),
        "wrong relu shape": (_blob(graph.symbol, json.dumps(bad_relu), consts), "differs from (1, 4, 6, 6)"),
        "unknown kernel": (_blob(graph.symbol, json.dumps(unknown_kernel), consts), "no kernel for relax.nn.gelu"),
        "missing attribute": (_blob(graph.symbol, json.dumps(missing_attr), consts), 'no field "strides"'),
        "dangling output": (_blob(graph.symbol, json.dumps(dangling), consts), "undeclared tensor nowhere"),
        "symbol mismatch": (_blob("other", ser.json, consts), "does not match the module symbol"),
        "graph version": (_blob(graph.symbol, ser.json.replace('"version":2', '"version":7'), consts),
                          "schema version 7"),
        "for a cpu feature": (_blob(graph.symbol, json.dumps(for_a_feature), consts), "before it is computed"),
        "cpu mark in version 1": (_blob(graph.symbol, json.dumps(marked_in_v1), consts),
                                  "only_if_cpu appears in a graph of schema version 1"),
        "doc ok": (_blob(graph.symbol, json.dumps(doc), consts), ""),
    }


def test_a_version_1_graph_still_loads_and_runs():
    """Artifacts exported before schema version 2 (which only added ``only_if_cpu``) load as they are."""
    model, graph, module = _conv_module()
    ser = serialize(graph)
    old = _load(_blob(graph.symbol, ser.json.replace('"version":2', '"version":1'),
                      {n: ser.constants[n] for n in sorted(ser.constants)}))
    x = np.random.default_rng(0).random((1, 3, 6, 6), dtype=np.float32)
    assert np.array_equal(_run_module(old, graph.symbol, x), _run_module(module, graph.symbol, x))


def test_corrupted_blobs_raise_clear_errors():
    _, _, module = _conv_module()
    cases = _mangled(_save(module))
    blob, _ = cases.pop("doc ok")
    _load(blob)  # the hand-written blob is valid: the mangled ones differ only where named
    for label, (blob, expect) in cases.items():
        with pytest.raises(ValueError) as info:
            _load(blob)
        message = str(info.value)
        assert message.startswith("byoc json_runtime:"), (label, message)
        assert expect in message, (label, message)


def test_every_truncation_is_an_error_not_a_crash():
    _, _, module = _conv_module()
    blob = _save(module)
    for cut in range(0, len(blob), max(1, len(blob) // 97)):
        with pytest.raises(ValueError, match="byoc json_runtime"):
            _load(blob[:cut])


def test_call_checks_its_arguments():
    import tvm

    m, graph, module = _conv_module()
    with pytest.raises(TypeError, match="expected 1 input and 1 output"):
        module[graph.symbol](tvm.runtime.tensor(_f(1, 3, 6, 6)))
    with pytest.raises(ValueError, match=r"shape \(1, 3, 5, 6\), expected \(1, 3, 6, 6\)"):
        module[graph.symbol](tvm.runtime.tensor(_f(1, 3, 5, 6)), tvm.runtime.empty((1, 4, 6, 6), "float32"))
    with pytest.raises(TypeError, match="not float32"):
        module[graph.symbol](tvm.runtime.tensor(_f(1, 3, 6, 6).astype(np.float64)),
                             tvm.runtime.empty((1, 4, 6, 6), "float32"))


def test_eight_threads_share_one_artifact():
    m = small_cnn()
    artifact = byoc.compile(m, vendors=["json_runtime"])
    inputs = [random_inputs(m, seed=s) for s in range(16)]
    expected = [onnxruntime_outputs(m, i) for i in inputs]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda i: [artifact.run(i) for _ in range(5)], inputs))
    for got_runs, want in zip(results, expected):
        for got in got_runs:
            _compare(got, want, "small_cnn, 8 threads")


def test_eight_threads_share_one_module():
    m, graph, module = _conv_module()
    xs = [random_inputs(m, seed=s)["x"] for s in range(8)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda x: [_run_module(module, graph.symbol, x) for _ in range(20)], xs))
    for x, runs in zip(xs, results):
        want = onnxruntime_outputs(m, {"x": x})
        for got in runs:
            _compare([got], want, "conv module, 8 threads")


# -- mixed artifact, exported and loaded in a fresh process ---------------------------------
def _conv_only_json_vendor():
    """json_runtime restricted to convolutions, so c_source takes the rest of a model."""
    base = byoc.get_vendor("json_runtime")
    rules = [dataclasses.replace(r, name="json_convs." + r.name.split(".", 1)[1])
             for r in base.rules if "conv2d" in r.name]
    return byoc.Vendor("json_convs", rules, base.codegen)


def test_mixed_artifact_exported_and_loaded_in_fresh_process(tmp_path):
    m = small_cnn()
    artifact = byoc.compile(m, vendors=[_conv_only_json_vendor(), "c_source"])
    vendors = {p.vendor for p in artifact.plan.partitions}
    assert vendors == {"json_convs", "c_source"}, artifact.plan.partitions
    path = artifact.export(tmp_path / "mixed.so")
    inputs = random_inputs(m, seed=7)
    np.savez(tmp_path / "inputs.npz", **inputs)
    script = textwrap.dedent(f"""
        import numpy as np, byoc
        artifact = byoc.load({str(path)!r})
        inputs = dict(np.load({str(tmp_path / 'inputs.npz')!r}))
        np.savez({str(tmp_path / 'outputs.npz')!r}, *artifact.run(inputs))
        print(sorted({{vendor for _, vendor in artifact.metadata["partitions"]}}))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[-2] == "['c_source', 'json_convs']"
    outputs = np.load(tmp_path / "outputs.npz")
    _compare([outputs[f"arr_{i}"] for i in range(len(outputs.files))], onnxruntime_outputs(m, inputs),
             "small_cnn mixed, fresh process")


def test_vendor_order_json_runtime_first():
    m = small_mlp()
    artifact = byoc.compile(m, vendors=["json_runtime", "c_source"])
    assert {p.vendor for p in artifact.plan.partitions} == {"json_runtime"}
    inputs = random_inputs(m)
    _compare(artifact.run(inputs), onnxruntime_outputs(m, inputs), "small_mlp json_runtime+c_source")


# -- the installed library ----------------------------------------------------------------
def test_runtime_library_is_installed_with_byoc_not_built_on_use():
    from byoc.codegens.json_runtime import runtime

    path = runtime.JSON_RUNTIME.library_path()
    assert path.name == "libbyoc_json_runtime.so" and path.is_file()
    assert path.resolve().parent == Path(runtime.__file__).resolve().parent


def test_a_missing_runtime_library_says_how_to_get_it():
    from byoc.codegens.json_runtime.runtime import RuntimeLibrary
    from byoc.errors import BuildError

    missing = RuntimeLibrary("no_such_runtime", package="byoc.codegens.json_runtime.runtime")
    with pytest.raises(BuildError, match=r"no_such_runtime runtime library \(libbyoc_no_such_runtime.so\) is "
                                         r"not installed; reinstall byoc"):
        missing.load()


@pytest.mark.parametrize("runtime", ["json_runtime", "dnnl"])
def test_the_rank_limit_is_the_one_the_kernels_header_writes(runtime):
    """The rank limit is written once (byoc_kernels.h's BYOC_MAX_RANK): the rules take rank MAX_RANK and refuse
    MAX_RANK + 1 with that number, and the runtimes, built with it, refuse a graph of rank MAX_RANK + 1."""
    import tvm_ffi

    from byoc.codegens.limits import MAX_RANK, defined_int

    assert MAX_RANK == defined_int("BYOC_MAX_RANK") >= 4
    fits, over = [1] * (MAX_RANK - 1) + [3], [1] * MAX_RANK + [3]
    assert not byoc.partition(single_op("Relu", {"x": fits}, fits), [runtime]).host_ops
    (refused,) = byoc.partition(single_op("Relu", {"x": over}, over), [runtime]).host_ops
    assert refused.reasons[runtime] == f"rank {MAX_RANK + 1} > {MAX_RANK} not supported"
    (graph,) = _graphs(single_op("Relu", {"x": fits}, fits), [runtime])
    sent = byoc.get_vendor(runtime).codegen.serialize(graph).json  # as the runtime reads it (its schema version)
    text = sent.replace(json.dumps(fits).replace(" ", ""), json.dumps(over).replace(" ", ""))
    assert text != sent
    byoc.get_vendor(runtime).codegen.load_runtime()
    with pytest.raises(ValueError, match=f"has rank above {MAX_RANK}"):
        tvm_ffi.get_global_func(f"byoc.{runtime}.create")(graph.symbol, text, [], [])
