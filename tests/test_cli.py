"""``python -m byoc.partition``: goldens of every format, exit codes, export, verify, HTML in chromium.

Goldens live in tests/golden/; rewrite them with ``BYOC_UPDATE_GOLDEN=1``.
Numerics are checked against onnxruntime, the HTML page in headless chromium.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import byoc
from byoc.annotations.c_source import RULES as C_SOURCE_RULES
from byoc.codegens.c_source import OP_EMITTERS, CSourceCodegen
from byoc.partition.__main__ import main

from cli_models import save, small_cnn, small_mlp

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("BYOC_UPDATE_GOLDEN") == "1"
MODELS = {"small_cnn": small_cnn, "small_mlp": small_mlp}
SUFFIX = {"text": "txt", "json": "json", "dot": "dot", "html": "html"}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    for name, build in MODELS.items():
        save(build(), folder / f"{name}.onnx")  # fixed file names: reports name the model by them
    return folder


def run_cli(*argv) -> tuple[int, str, str]:
    """The CLI in this process (so test-registered vendors are visible)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def run_module(*argv, cwd=None) -> subprocess.CompletedProcess:
    """The CLI as users run it: ``python -m byoc.partition``."""
    return subprocess.run([sys.executable, "-m", "byoc.partition", *map(str, argv)],
                          capture_output=True, text=True, cwd=cwd, timeout=600)


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"golden {path} is missing; create it with BYOC_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8"), (
        f"output differs from golden {path}; if the change is intended, rerun with BYOC_UPDATE_GOLDEN=1"
    )


# -- goldens ---------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", list(SUFFIX))
@pytest.mark.parametrize("model", list(MODELS))
def test_golden(model_dir, model, fmt):
    code, out, _ = run_cli(model_dir / f"{model}.onnx", "--format", fmt, "-q")
    assert code == 0
    assert str(model_dir) not in out  # no absolute paths in reports
    check_golden(f"{model}.{SUFFIX[fmt]}", out)


def test_golden_with_policies(model_dir):
    code, out, _ = run_cli(model_dir / "small_cnn.onnx", "--keep-on-host", "Relu", "--min-ops", "2", "-q")
    assert code == 0
    check_golden("small_cnn_policies.txt", out)


def test_text_has_the_three_parts_and_memory(model_dir):
    _, out, _ = run_cli(model_dir / "small_cnn.onnx", "-q")
    for heading in ("Summary", "Partitions", "Host ops (grouped by reason)", "Memory (activations)"):
        assert f"\n{heading}\n" in out
    assert "BatchNormalization: 1 node — c_source: no c_source rule for relax.nn.batch_norm" in out


def test_output_file_and_progress_on_stderr(model_dir, tmp_path):
    out_path = tmp_path / "report.json"
    code, out, err = run_cli(model_dir / "small_mlp.onnx", "--format", "json", "-o", out_path)
    assert code == 0 and out == ""
    assert json.loads(out_path.read_text())["schema_version"] == 1
    assert all(line.startswith("byoc: ") for line in err.splitlines()) and len(err.splitlines()) >= 3


def test_list_vendors():
    code, out, _ = run_cli("--list-vendors")
    assert code == 0
    assert any(line.split()[0] == "c_source" for line in out.splitlines())
    assert "unavailable" not in next(line for line in out.splitlines() if line.split()[0] == "c_source")


def test_list_vendors_marks_dnnl_unavailable_without_onednn_and_says_what_to_install(monkeypatch):
    from importlib import metadata

    real = metadata.distribution

    def distribution(name):  # as if the onednn-cpu-gomp wheel were not installed
        if name == "onednn-cpu-gomp":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "distribution", distribution)
    code, out, err = run_cli("--list-vendors")
    assert code == 0 and err == ""
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert lines["dnnl"].split(None, 1)[1].startswith(
        '(unavailable: the dnnl vendor needs oneDNN, and onednn-cpu-gomp is not installed; pip install "byoc-tvm[dnnl]"')
    assert lines["dnnl"].endswith(byoc.get_vendor("dnnl").description)
    assert "unavailable" not in lines["c_source"] + lines["json_runtime"]


@pytest.mark.parametrize("argv", [
    ["--vendor", "dnnl", "{cnn}"],
    ["{cnn}", "--vendor", "dnnl"],
    ["--vendor", "dnnl,c_source", "{cnn}"],
    ["--vendor", "dnnl", "--vendor", "c_source", "{cnn}"],
    ["--keep-on-host", "Relu,fc1", "--vendor", "dnnl", "{cnn}"],
])
def test_options_work_in_any_order_repeated_or_comma_separated(model_dir, argv):
    argv = [str(model_dir / "small_cnn.onnx") if a == "{cnn}" else a for a in argv]
    code, out, err = run_cli(*argv, "--format", "json", "-q")
    assert code == 0, err
    report = json.loads(out)
    assert report["vendors"][0] == "dnnl" and report["partitions"][0]["vendor"] == "dnnl"
    if "c_source" in ",".join(argv):
        assert report["vendors"] == ["dnnl", "c_source"]
    if "--keep-on-host" in argv:
        assert report["policies"]["keep_on_host"] == ["Relu", "fc1"]


def test_a_vendor_that_cannot_run_on_the_target_offloads_nothing_and_says_why(model_dir):
    code, out, _ = run_cli(model_dir / "small_cnn.onnx", "--vendor", "dnnl", "--target", "s390x", "-q")
    assert code == 0
    assert "dnnl runs on x86_64 only, not s390x" in out
    assert "dnnl_0" not in out
    code, _, err = run_cli(model_dir / "small_cnn.onnx", "--vendor", "dnnl", "--target", "s390x", "--strict", "-q")
    assert code == 2 and "dnnl runs on x86_64 only, not s390x" in err


def test_a_vendor_that_cannot_build_for_the_target_is_one_warning_line(model_dir):
    code, out, err = run_cli(model_dir / "small_cnn.onnx", "--vendor", "dnnl", "--target", "s390x", "-q")
    assert code == 0 and "partitions     0" in out
    assert err.splitlines() == ["python -m byoc.partition: warning: dnnl cannot build for s390x (its runtime is "
                                "x86_64 only): all its ops stay on the host"]
    _, _, err = run_cli(model_dir / "small_cnn.onnx", "--vendor", "dnnl,c_source", "--target", "s390x", "-q")
    assert len(err.splitlines()) == 1 and "dnnl cannot build for s390x" in err
    _, _, err = run_cli(model_dir / "small_cnn.onnx", "--vendor", "dnnl", "-q")
    assert err == ""  # x86_64: nothing to warn about


# -- exit codes --------------------------------------------------------------------------------
def test_exit_0_as_a_module(model_dir):
    done = run_module(model_dir / "small_cnn.onnx", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["partitions"]
    assert "byoc: partitioning" in done.stderr


@pytest.mark.parametrize("argv, message", [
    (["missing.onnx"], "model file not found"),
    (["{cnn}", "--vendor", "nope"], "unknown vendor 'nope'"),
    (["{cnn}", "--keep-on-host", "NoSuchNode"], "match no ONNX node name or op type"),
    (["{cnn}", "--min-ops", "0"], "min_ops must be at least 1"),
    (["{cnn}", "--format", "yaml"], "invalid choice"),
    (["{cnn}", "--input-shape", "x"], "expected NAME=D1,D2"),
    (["{cnn}", "--inputs", "a.npz"], "only used with --verify, --profile, --memory or --placement measured"),
    (["{cnn}", "--trace", "t.json"], "--trace is only used with --profile"),
    (["{cnn}", "--runs", "10"], "--runs is only used with --profile"),
    (["{cnn}", "--profile", "--runs", "0"], "--runs 0: give at least 1"),
    (["{cnn}", "--profile", "--target", "s390x"], "cannot run on this machine"),
    (["{cnn}", "--verify", "--inputs", "missing.npz"], "inputs file not found"),
    (["{cnn}", "--verify", "--inputs", "{cnn}"], "is not an .npz archive of arrays; save inputs with numpy.savez"),
    (["{dir}"], "is a folder, not a model file"),
    (["{cnn}", "--target", "sparc"], "unknown target 'sparc'"),
    (["{cnn}", "-o", "{cnn}"], "refusing to overwrite"),
    (["{cnn}", "--export-onnx", "{cnn}"], "refusing to overwrite"),
    ([], "MODEL.onnx is required"),
])
def test_exit_2_with_one_line(model_dir, argv, message):
    argv = [a.format(cnn=model_dir / "small_cnn.onnx", dir=model_dir) for a in argv]
    before = (model_dir / "small_cnn.onnx").read_bytes()
    code, out, err = run_cli(*argv, "-q")
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert message in err and "Traceback" not in err
    assert (model_dir / "small_cnn.onnx").read_bytes() == before


def test_exit_2_as_a_module_and_debug_traceback(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    done = run_module(bad, "-q")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "not an ONNX protobuf" in done.stderr
    done = run_module(bad, "-q", "--debug")
    assert done.returncode == 2 and "Traceback" in done.stderr


# -- export ------------------------------------------------------------------------------------
@pytest.mark.parametrize("model", list(MODELS))
def test_export_onnx_checks_and_runs_the_same(model_dir, tmp_path, model):
    src = model_dir / f"{model}.onnx"
    out = tmp_path / "partitioned.onnx"
    code, _, err = run_cli(src, "--export-onnx", out, "-q")
    assert code == 0, err
    exported = onnx.load(str(out))
    onnx.checker.check_model(exported, full_check=True)
    calls = [n for n in exported.graph.node if n.domain == "byoc.c_source"]
    assert calls and len(exported.functions) == len(calls)
    original = onnx.load(str(src))
    name = original.graph.input[0].name
    shape = [d.dim_value for d in original.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    want = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {name: x})
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {name: x})
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


# -- verify ------------------------------------------------------------------------------------
def test_verify_ok_with_inputs_file(model_dir, tmp_path):
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, x=np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32))
    code, out, _ = run_cli(model_dir / "small_cnn.onnx", "--verify", "--inputs", inputs, "-q")
    assert code == 0
    assert "Verification: ok" in out and "inputs.npz" in out
    # the build --verify makes reports each partition's runtime memory (c_source: its C's temporaries)
    assert "c_source_0 (c_source)" in out and "planned in all" in out and "not built here" not in out


def test_verify_inputs_with_wrong_name_is_exit_2(model_dir, tmp_path):
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, image=np.zeros((1, 3, 8, 8), np.float32))
    code, _, err = run_cli(model_dir / "small_cnn.onnx", "--verify", "--inputs", inputs, "-q")
    assert code == 2 and "missing ['x']" in err


class _WrongReluCodegen(CSourceCodegen):
    """c_source, except that a standalone relu is emitted as a copy (a deliberate bug)."""

    emitters = {**OP_EMITTERS, "relax.nn.relu": OP_EMITTERS["relax.reshape"]}


@pytest.fixture
def broken_vendor():
    rules = tuple(dataclasses.replace(r, name="broken." + r.name.split(".", 1)[1]) for r in C_SOURCE_RULES)
    vendor = byoc.register_vendor(byoc.Vendor("broken", rules, _WrongReluCodegen()))
    yield vendor
    byoc.unregister_vendor("broken")


def test_verify_names_the_broken_partition(model_dir, broken_vendor):
    # In small_cnn, relu1 is fused into conv1's kernel (correct); relu2 stands
    # alone at the start of the second partition, broken_1, and is miscompiled.
    code, out, err = run_cli(model_dir / "small_cnn.onnx", "--vendor", "broken", "--verify")
    assert code == 1
    assert "Verification: mismatch" in out
    assert "moving broken_1 (broken: relu2, pool1, flatten1, fc1) back to the host" in out
    assert "broken_0 " not in out.split("Verification")[1]
    assert err.strip().splitlines()[-1].endswith("caused by broken_1")


def test_verify_json_names_the_culprit(model_dir, broken_vendor):
    code, out, _ = run_cli(model_dir / "small_cnn.onnx", "--vendor", "broken", "--verify", "--format", "json", "-q")
    assert code == 1
    verify = json.loads(out)["verify"]
    assert verify["status"] == "mismatch" and verify["culprits"] == ["broken_1"]


# -- HTML in a real browser ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def chromium():
    found = shutil.which("chromium")
    if found is None:
        if shutil.which("apt-get") is None:
            pytest.skip("chromium is not installed and apt-get is unavailable to install it")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update"], check=True, capture_output=True, env=env, timeout=900)
        subprocess.run(["apt-get", "install", "-y", "chromium"], check=True, capture_output=True, env=env,
                       timeout=1800)
        found = shutil.which("chromium")
        assert found, "apt-get install chromium did not provide /usr/bin/chromium"
    return found


def _headless(chromium_path: str, *args: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [chromium_path, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
             *args],
            capture_output=True, text=True, timeout=300,
        )


def _probed_rows(chromium_path: str, page: Path, rows_js: str, window: str) -> list[str]:
    """The rows a test-only script (``rows_js`` fills ``rows``, one string each) finds in ``page`` as headless
    chromium lays it out at ``window`` (WIDTH,HEIGHT)."""
    script = ("<script>\nconst rows = [];\n" + rows_js + "\nconst pre = document.createElement('pre');\n"
              "pre.id = 'probe';\npre.textContent = rows.join('\\n');\ndocument.body.appendChild(pre);\n</script>")
    probed = page.with_name("probed-" + page.name)
    probed.write_text(page.read_text().replace("</body>", script + "</body>"))
    dom = _headless(chromium_path, f"--window-size={window}", "--dump-dom", probed.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    return dom.stdout.split('<pre id="probe">', 1)[1].split("</pre>", 1)[0].split("\n")


# Where did the browser draw each node, and is it what a pointer finds there?
_NODE_ROWS = """
for (const g of document.querySelectorAll("g.node")) {
  const r = g.getBoundingClientRect();
  const hit = document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2);
  const fill = getComputedStyle(g.querySelector("rect")).fill;
  rows.push([g.dataset.name, Math.round(r.width), Math.round(r.height), !!hit && g.contains(hit), fill,
             g.querySelector("title").textContent.replace(/\\n/g, " / ")].join("|"));
}
const graph = document.getElementById("graph").getBoundingClientRect();
rows.push(["#graph", Math.round(graph.width), Math.round(document.documentElement.clientWidth), "", "", ""].join("|"));
"""


def test_html_renders_in_headless_chromium(model_dir, tmp_path, chromium):
    page = tmp_path / "report.html"
    code, _, _ = run_cli(model_dir / "small_cnn.onnx", "--format", "html", "-o", page, "-q")
    assert code == 0
    drawn = {}
    for row in _probed_rows(chromium, page, _NODE_ROWS, "1000,1400"):
        name, width, height, on_top, fill, title = row.split("|", 5)
        drawn[name] = (int(width), int(height), on_top == "true", fill, title)
    graph_width, page_width = drawn.pop("#graph")[:2]
    assert graph_width >= 0.6 * page_width, (graph_width, page_width)  # the graph uses the page
    assert set(drawn) == {n.name for n in small_cnn().graph.node}
    for name, (width, height, on_top, _, _) in drawn.items():
        assert width > 50 and height > 20 and on_top, (name, drawn[name])
    assert drawn["conv1"][3] == "rgb(142, 202, 230)"  # c_source_0's colour
    assert drawn["relu2"][3] == "rgb(255, 183, 3)"  # c_source_1's: same vendor, another partition
    assert drawn["bn1"][3] == "rgb(217, 217, 217)"  # host colour
    legend = page.read_text().split('<div class="legend">', 1)[1].split("</div>", 1)[0]
    assert "c_source_0 (c_source)" in legend and "c_source_1 (c_source)" in legend
    assert "none: nothing left to run after import" in legend
    assert "no c_source rule for relax.nn.batch_norm" in drawn["bn1"][4]  # the hover text
    shot = tmp_path / "report.png"
    done = _headless(chromium, "--window-size=1000,1400", f"--screenshot={shot}", page.as_uri())
    assert done.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _constants_model():
    """As a torch export writes it: each constant a Constant node of its own (20 of them, some through a
    Cast), read by an Add chain and a Reshape."""
    from onnx import TensorProto, helper

    nodes, last = [], "x"
    for i in range(20):
        value = helper.make_tensor(f"v{i}", TensorProto.FLOAT, [16], np.full(16, 0.1 * i, np.float32))
        nodes.append(helper.make_node("Constant", [], [f"c{i}"], name=f"const_{i}", value=value))
        if i % 5 == 0:  # a constant computed from a constant: folded in with it
            nodes.append(helper.make_node("Cast", [f"c{i}"], [f"k{i}"], name=f"cast_{i}", to=TensorProto.FLOAT))
        nodes.append(helper.make_node("Add", [last, f"k{i}" if i % 5 == 0 else f"c{i}"], [f"a{i}"], name=f"add_{i}"))
        last = f"a{i}"
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [4, 4])
    nodes += [helper.make_node("Constant", [], ["s"], name="const_shape", value=shape),
              helper.make_node("Reshape", [last, "s"], ["y"], name="reshape")]
    graph = helper.make_graph(nodes, "constants", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_html_graph_folds_constant_nodes_into_their_consumers_and_stays_readable(tmp_path, chromium):
    model = tmp_path / "constants.onnx"
    model.write_bytes(_constants_model().SerializeToString())
    page = tmp_path / "constants.html"
    code, _, _ = run_cli(model, "--format", "html", "-o", page, "-q")
    assert code == 0
    probe = """
for (const g of document.querySelectorAll("g.node")) {
  const label = g.querySelector("text").getBoundingClientRect();
  rows.push([g.dataset.name, label.height.toFixed(1), g.querySelector("title").textContent.replace(/\\n/g, " / ")].join("|"));
}
"""
    drawn = {}
    for row in _probed_rows(chromium, page, probe, "1400,1000"):
        name, height, title = row.split("|", 2)
        drawn[name] = (float(height), title)
    assert set(drawn) == {f"add_{i}" for i in range(20)} | {"reshape"}  # no Constant or Cast box
    assert min(h for h, _ in drawn.values()) >= 10, drawn  # labels drawn at a readable size at 1400 px
    assert drawn["add_5"][1].endswith("constants folded in: const_5, cast_5")
    assert drawn["reshape"][1].endswith("constants folded in: const_shape")
    dot = run_cli(model, "--format", "dot", "-q")[1]
    assert '"n:const_3"' not in dot and "constants folded in: const_3" in dot


def test_export_onnx_warns_in_one_line_when_a_node_is_split(model_dir, tmp_path):
    vendor = byoc.Vendor("mm_only", (byoc.OpRule("mm_only.matmul", "relax.matmul"),), CSourceCodegen())
    byoc.register_vendor(vendor)
    try:
        code, _, err = run_cli(model_dir / "small_cnn.onnx", "--vendor", "mm_only,c_source",
                               "--export-onnx", tmp_path / "split.onnx", "-q")
    finally:
        byoc.unregister_vendor("mm_only")
    assert code == 0 and (tmp_path / "split.onnx").is_file()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m byoc.partition: warning: ONNX nodes whose ops went "
                                                   "to several places stay plain nodes"), lines
    assert "fc1 (mm_only_0 + c_source_2); partitions with no whole node, so absent from the file: mm_only_0, c_source_2" in lines[0]


# -- vendor options --------------------------------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["--vendor", "dnnl", "--vendor-option", "dnnl.winograd=maybe"],
     "vendor 'dnnl' option 'winograd' takes on or off (True or False), got 'maybe'"),
    (["--vendor", "dnnl", "--vendor-option", "dnnl.winogard=off"],
     "vendor 'dnnl' has no option 'winogard'; its options are contention_watch, shape_cache, winograd"),
    (["--vendor-option", "dnnl.winograd=off"],
     "vendor 'dnnl' is not among the vendors (c_source); add it with --vendor"),
    (["--vendor-option", "winograd=off"], "expected VENDOR.OPTION=VALUE, e.g. dnnl.winograd=off"),
], ids=["bad-value", "unknown-option", "vendor-not-used", "no-vendor"])
def test_a_bad_vendor_option_is_exit_2_with_one_line(model_dir, argv, message):
    code, out, err = run_cli(model_dir / "small_cnn.onnx", *argv, "-q")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_vendor_options_reach_the_verify_build_and_the_report(model_dir, monkeypatch):
    monkeypatch.setenv("BYOC_DNNL_CONTENTION", "off")
    code, out, err = run_cli(model_dir / "small_cnn.onnx", "--vendor", "dnnl", "--vendor-option", "dnnl.winograd=off",
                             "--vendor-option", "dnnl.contention_watch=on", "--verify", "-q")
    assert code == 0, err
    assert out.splitlines()[2] == ("vendor options: dnnl.contention_watch=off (BYOC_DNNL_CONTENTION=off from the "
                                   "environment), dnnl.winograd=off")
    assert "Verification: ok" in out
    monkeypatch.delenv("BYOC_DNNL_CONTENTION")
    code, out, _ = run_cli(model_dir / "small_cnn.onnx", "--vendor", "dnnl", "--vendor-option", "dnnl.winograd=off",
                           "--format", "json", "-q")
    assert code == 0 and json.loads(out)["vendor_options"] == {
        "dnnl": {"winograd": {"value": False, "default": True, "source": "build"}}}
    code, out, _ = run_cli(model_dir / "small_cnn.onnx", "--vendor", "dnnl", "-q")
    assert code == 0 and "vendor options" not in out  # every option its default: the report is as before


# -- an artifact given as the model ------------------------------------------------------------
@pytest.mark.parametrize("kind, message", [
    ("artifact", "is a byoc artifact (a shared library that Artifact.export wrote), not an ONNX model: load it "
                 "with byoc.load(path) in Python to run it"),
    ("other_elf", "is an ELF file (a shared library or program), not an ONNX model"),
], ids=["artifact", "other_elf"])
def test_a_shared_library_given_as_the_model_is_named(model_dir, tmp_path, kind, message):
    """An exported .so passed to the CLI said "not an ONNX protobuf"; it is named, with what to do instead."""
    path = tmp_path / "model.so"
    if kind == "artifact":
        byoc.compile(model_dir / "small_cnn.onnx", vendors=["c_source"]).export(path)
    else:
        path.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(57))
    code, out, err = run_cli(path, "-q")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert "protobuf" not in err
    with pytest.raises(byoc.NotOnnxError, match=r"is (a byoc artifact|an ELF file)"):
        byoc.partition(path)


def test_profile_adds_a_time_section_and_writes_a_trace(model_dir, tmp_path):
    """--profile builds, runs and reports each partition and host function per run, a dnnl partition's
    oneDNN primitives summed by implementation; --trace writes the last run as Trace Event JSON; --format json
    carries the profile (schema 1)."""
    pytest.importorskip("byoc.codegens.dnnl")
    model = model_dir / "small_cnn.onnx"
    code, out, err = run_cli(model, "--vendor", "dnnl", "--keep-on-host", "Gemm", "--profile", "--runs", "3",
                             "--trace", tmp_path / "t.json", "-q")
    assert code == 0, err
    section = out.split("\nTime (3 runs: ", 1)[1]
    assert "dnnl_0" in section and "host" in section and "outside any call" in section
    assert "dnnl_0 steps: " in section and "convolution" in section
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert {"dnnl_0", "run"} <= {e["name"] for e in events}
    code, out, err = run_cli(model, "--vendor", "dnnl", "--profile", "--runs", "2", "--format", "json", "-q")
    time = json.loads(out)["time"]
    assert code == 0 and time["schema"] == 1 and time["runs"] == 2
    assert [c["name"] for c in time["calls"] if c["where"] == "dnnl"] == ["dnnl_0"]


_BAR_ROWS = """for (const row of document.querySelectorAll("div.bar-row")) {
  const bar = row.querySelector(".bar").getBoundingClientRect();
  const track = row.querySelector(".bar-track").getBoundingClientRect();
  rows.push([row.dataset.name, row.dataset.ms, bar.width, track.width].join("|"));
}"""


def test_the_html_time_section_draws_a_bar_per_call_in_proportion(model_dir, tmp_path, chromium):
    """--profile --format html: one bar per partition, host function, the VM's builtins and the time outside any
    call, each as wide as its share of the run, as headless chromium lays them out."""
    pytest.importorskip("byoc.codegens.dnnl")
    page = tmp_path / "report.html"
    code, _, err = run_cli(model_dir / "small_cnn.onnx", "--vendor", "dnnl", "--keep-on-host", "Gemm", "--profile",
                           "--runs", "3", "--format", "html", "-o", page, "-q")
    assert code == 0, err
    bars = {name: (float(ms), float(width), float(track)) for name, ms, width, track in
            (row.split("|") for row in _probed_rows(chromium, page, _BAR_ROWS, "1400,1000"))}
    assert {"dnnl_0", "VM builtins", "outside any call"} <= set(bars) and len(bars) >= 4, bars
    total = sum(ms for ms, _, _ in bars.values())
    for name, (ms, width, track) in bars.items():
        assert abs(width - track * ms / total) <= 0.02 * track + 1, (name, ms, width, track)


def test_a_vendor_registered_by_a_script_is_usable_with_vendor_module(tmp_path):
    script = tmp_path / "acme_vendor.py"
    script.write_text(
        "import byoc\n"
        "from byoc.codegens.c_source import CSourceCodegen\n"
        "from byoc.vendor import OpRule, Vendor, always\n"
        "byoc.register_vendor(Vendor('acme', (OpRule('acme.relu', 'relax.nn.relu', always),), CSourceCodegen(),\n"
        "                            description='relu in C'))\n")
    model = tmp_path / "m.onnx"
    model.write_bytes(small_cnn().SerializeToString())
    done = run_module(str(model), "--vendor-module", str(script), "--vendor", "acme", "--format", "json", "-q")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["summary"]["partitions"] == {"acme": 2}
    listed = run_module("--vendor-module", str(script), "--list-vendors")
    assert listed.returncode == 0 and "acme" in listed.stdout and "relu in C" in listed.stdout
    for module, message in ((str(tmp_path / "nope.py"), "nope.py: no such file"),
                            ("no_such_vendor_module", "No module named 'no_such_vendor_module' (give an importable")):
        done = run_module(str(model), "--vendor-module", module, "--vendor", "acme")
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
    script.write_text("raise RuntimeError('no licence')\n")
    done = run_module(str(model), "--vendor-module", str(script), "--vendor", "acme")
    assert done.returncode == 2 and f"--vendor-module {script} raised RuntimeError: no licence" in done.stderr


def test_a_module_that_defines_vendor_is_usable_with_vendor_module(tmp_path):
    """A module exposing VENDOR (what an entry point ``module:VENDOR`` names) needs no register_vendor call."""
    package = tmp_path / "acme_npu"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from byoc.codegens.c_source import CSourceCodegen\n"
        "from byoc.vendor import OpRule, Vendor\n"
        "VENDOR = Vendor('acme_npu', (OpRule('relu', 'relax.nn.relu'),), CSourceCodegen())\n")
    model = tmp_path / "m.onnx"
    model.write_bytes(small_cnn().SerializeToString())
    done = subprocess.run([sys.executable, "-m", "byoc.partition", str(model), "--vendor-module", "acme_npu",
                           "--vendor", "acme_npu", "--format", "json", "-q"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["summary"]["partitions"] == {"acme_npu": 2}


def test_long_stages_show_progress_on_stderr_unless_quiet(model_dir):
    """The library logs its stages to the ``byoc`` logger (never configuring logging itself); the CLI prints them."""
    code, _, err = run_cli(model_dir / "small_cnn.onnx", "--vendor", "dnnl", "--verify")
    assert code == 0
    for line in ("byoc: preparing small_cnn: ", "byoc: annotating and partitioning for dnnl",
                 "byoc: dnnl: compiling 1 partition(s)", "byoc: host: compiling"):
        assert any(got.startswith(line) for got in err.splitlines()), (line, err)
    code, _, err = run_cli(model_dir / "small_cnn.onnx", "--vendor", "dnnl", "--verify", "-q")
    assert code == 0 and err == ""
    import logging

    assert not logging.getLogger("byoc").handlers  # the CLI's handler is gone when it returns
