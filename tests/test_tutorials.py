"""The tutorials run as written, the README's examples print what it shows, and docs/ops.md is the generated op table.

Each tutorial README is executed block by block in a fresh copy of the tutorials, in the folder the README
says to run its commands in (``cd tutorials/...``):

- ```` ```console ````: every ``$ command`` runs in bash; its stdout must equal
  the lines that follow it (stderr, where byoc writes progress, is ignored);
- ```` ```python run ````: runs as a script in its own process; a
  ```` ```text ```` block right after it is its expected stdout;
- ```` ```LANG excerpt=PATH ````: must appear verbatim in PATH, so quoted code
  cannot drift from the vendor's real code;
- ```` ```sh ````: install/uninstall/count commands, checked against what the
  fixtures do rather than run blindly.

Numbers are checked against onnxruntime by the tutorials themselves (their
outputs print whether they match), never against byoc. Each tutorial runs a
second time over its own files, and in a git repository holding the tutorials
leaves ``git status`` clean.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import byoc
from byoc import optable

REPO = Path(__file__).resolve().parent.parent
TUTORIAL_1 = REPO / "tutorials" / "01_new_vendor"
TUTORIAL_2 = REPO / "tutorials" / "02_deploy_s390x"
TUTORIAL_3 = REPO / "tutorials" / "03_generate"
TUTORIAL_4 = REPO / "tutorials" / "04_npu"
TOY_PACKAGE = TUTORIAL_1 / "toy_npu"
TOY_SOURCES = TOY_PACKAGE / "src" / "toy_npu"
TOY_DIST = "byoc-toy-npu"
COMMAND_TIMEOUT = 900  # a hang fails the test instead of blocking CI; not a timing assertion

_BLOCK = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.S | re.M)


def blocks(readme: Path) -> list[tuple[str, str]]:
    """(info string, body) of every fenced block in ``readme``, in order."""
    return [(info.strip(), body) for info, body in _BLOCK.findall(readme.read_text())]


def _env() -> dict:
    # `python` in the README must be this interpreter.
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def _run(command, cwd: Path, shell: bool = False) -> str:
    proc = subprocess.run(command, cwd=cwd, shell=shell, executable="/bin/bash" if shell else None,
                          capture_output=True, text=True, env=_env(), timeout=COMMAND_TIMEOUT)
    assert proc.returncode == 0, f"{command} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return proc.stdout


def _console(body: str) -> list[tuple[str, str]]:
    """(command, expected stdout) pairs of a console block."""
    steps: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            assert steps, f"console block output before any command: {line!r}"
            steps[-1][1].append(line)
    return [(command, "".join(f"{line}\n" for line in out)) for command, out in steps]


def tutorials_copy(dest: Path) -> Path:
    """What a clone holds of the tutorials (and the root .gitignore), copied to ``dest``; returns ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(REPO / ".gitignore", dest / ".gitignore")
    shutil.copytree(REPO / "tutorials", dest / "tutorials",
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    return dest


def workdir_of(readme: Path, root: Path) -> Path:
    """Where ``readme`` says to run its commands (``cd tutorials/...``) in the copy at ``root``; else ``root``."""
    said = re.search(r"\bcd (tutorials/[\w./-]+?)/?`", readme.read_text())
    return root / said.group(1) if said else root


def run_tutorial(readme: Path, workdir: Path, sh_allowed: set[str], again: dict[str, str] | None = None) -> None:
    """Execute ``readme``'s blocks in ``workdir`` as the module docstring describes.

    ``again`` maps a console command to what it prints, instead of its shown
    output, when the tutorial runs a second time over its own files.
    """
    with tempfile.TemporaryDirectory(prefix="byoc-tutorial-") as scripts:  # not in workdir: a user has no such files
        _run_blocks(readme, workdir, sh_allowed, again or {}, Path(scripts))


def _run_blocks(readme: Path, workdir: Path, sh_allowed: set[str], again: dict[str, str], scripts: Path) -> None:
    items = blocks(readme)
    for index, (info, body) in enumerate(items):
        if info == "console":
            for command, expected in _console(body):
                assert _run(command, workdir, shell=True) == again.get(command, expected), command
        elif info == "python run":
            script = scripts / f"step_{index}.py"
            script.write_text(body)
            out = _run([sys.executable, str(script)], workdir)
            nxt = items[index + 1] if index + 1 < len(items) else None
            if nxt is not None and nxt[0] == "text":
                assert out == nxt[1]
        elif " excerpt=" in info:
            source = (readme.parent / info.split("=", 1)[1]).read_text()
            assert body in source, f"README excerpt is not in {info.split('=', 1)[1]}:\n{body}"
        elif info == "sh":
            for line in body.strip().splitlines():
                assert line in sh_allowed, f"unexpected sh command in {readme.name}: {line}"


def _installed() -> bool:
    try:
        importlib.metadata.distribution(TOY_DIST)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def _pip(*args: str) -> None:
    _run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args], REPO)


@pytest.fixture(scope="module")
def toy_npu(request):
    """The tutorial's package, pip-installed into this environment; the toy_npu module."""
    was_installed = _installed()
    _pip("install", "--no-deps", str(TOY_PACKAGE))
    if not was_installed:
        request.addfinalizer(lambda: _pip("uninstall", "-y", TOY_DIST))
    importlib.invalidate_caches()
    return importlib.import_module("toy_npu")


# -- tutorial 1: a new vendor ------------------------------------------------------------------
def test_toy_npu_is_as_short_as_the_documents_say():
    """Every "under N lines" the tutorial and the vendor guide say of the toy NPU holds: the documents make
    the claim, this test keeps it true (no count is kept by hand)."""
    files = sorted(TOY_SOURCES.glob("*.py"))
    lines = sum(len(f.read_text().splitlines()) for f in files)
    assert {f.name for f in files} == {"__init__.py", "rules.py", "codegen.py"}
    claims = [int(n) for doc in (TUTORIAL_1 / "README.md", REPO / "docs" / "vendor_guide.md")
              for n in re.findall(r"under (\d+) lines", doc.read_text())]
    assert claims, "the documents no longer say how short the vendor is: drop this test or the claim"
    assert lines < min(claims), f"the toy NPU vendor has {lines} lines; the documents say under {min(claims)}"


def test_toy_npu_is_found_through_the_entry_point(toy_npu):
    entries = [e for e in importlib.metadata.entry_points(group="byoc.vendors") if e.name == "toy_npu"]
    assert [e.value for e in entries] == ["toy_npu:VENDOR"]
    assert entries[0].load() is toy_npu.VENDOR


TUTORIAL_1_SH = {f"pip install ./{TOY_PACKAGE.relative_to(TUTORIAL_1)}", f"pip uninstall -y {TOY_DIST}",
                 f"cat {TOY_SOURCES.relative_to(TUTORIAL_1)}/*.py | wc -l",
                 "rm -f small_cnn.onnx small_cnn_toy_npu.so split.html split.onnx"}
# What its commands print when they run again over their own files (the README says so).
TUTORIAL_1_AGAIN = {"python -m byoc.examples small_cnn.onnx": "small_cnn.onnx already holds small_cnn\n"}


def test_tutorial_01_runs_as_written_and_again_over_its_own_files(toy_npu, tmp_path):
    readme = TUTORIAL_1 / "README.md"
    run_twice_in_a_repository(readme, TUTORIAL_1_SH, ["small_cnn.onnx", "small_cnn_toy_npu.so"], tmp_path,
                              again=TUTORIAL_1_AGAIN)  # e.g. export writes over its .so
    for printed in TUTORIAL_1_AGAIN.values():
        assert f"`{printed.strip()}`" in readme.read_text(), "the README says what a second run prints"


def _model(nodes, inputs, outputs, inits) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _conv_model(kernel: int, in_ch: int, out_ch: int) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((out_ch, in_ch, kernel, kernel), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[kernel // 2] * 4)
    return _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, in_ch, 8, 8])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, out_ch, 8, 8])], [w])


def _matmul_model(k: int, dtype=np.float32) -> onnx.ModelProto:
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    w = numpy_helper.from_array(np.ones((k, 4), dtype), "w")
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    return _model([node], [helper.make_tensor_value_info("x", elem, [2, k])],
                  [helper.make_tensor_value_info("y", elem, [2, 4])], [w])


@pytest.mark.parametrize("model, node, reason", [
    (_conv_model(7, 8, 8), "conv", "kernel 7x7 > 5x5"),
    (_conv_model(3, 8, 12), "conv", "output channels 12 not a multiple of 8"),
    (_conv_model(3, 4, 8), "conv", "input channels 4 not a multiple of 8"),
    (_matmul_model(8192), "mm", "matmul K=8192 > 4096"),
    (_matmul_model(16, np.float64), "mm", "dtype float64 not supported (float32 only)"),
], ids=["kernel", "out-channels", "in-channels", "matmul-k", "float64"])
def test_toy_npu_rejects_with_reasons(toy_npu, model, node, reason):
    plan = byoc.partition(model, vendors=[toy_npu.VENDOR])
    assert plan.partitions == []
    assert {d.node.name: d.reasons["toy_npu"] for d in plan.host_ops} == {node: reason}


@pytest.mark.parametrize("model, rules", [
    (_conv_model(5, 8, 16), ["toy_npu.conv2d"]),
    (_matmul_model(4096), ["toy_npu.matmul"]),
], ids=["conv-5x5", "matmul-k-4096"])
def test_toy_npu_takes_what_is_within_its_limits(toy_npu, model, rules):
    plan = byoc.partition(model, vendors=[toy_npu.VENDOR])
    assert [p.rules for p in plan.partitions] == [rules]
    assert plan.host_ops == []


# -- tutorial 2: deploy to s390x ---------------------------------------------------------------
@pytest.fixture(scope="module")
def s390x_toolchain():
    from byoc.deploy.toolchain import AptUnavailable, install_missing

    try:
        return install_missing("s390x")
    except AptUnavailable as err:
        pytest.skip(str(err))


TUTORIAL_2_SH = {"apt-get update && apt-get install -y --no-install-recommends gcc-s390x-linux-gnu "
                 "libc6-dev-s390x-cross qemu-user", "rm -rf small_cnn.onnx small_cnn_s390x"}


def test_tutorial_02_runs_as_written_and_again_over_its_own_files(s390x_toolchain, tmp_path):
    run_twice_in_a_repository(TUTORIAL_2 / "README.md", TUTORIAL_2_SH, ["small_cnn.onnx", "small_cnn_s390x/model"],
                              tmp_path)


# -- tutorial 3: generation with a KV cache ----------------------------------------------------
TUTORIAL_3_SH = {"rm -f decoder.onnx"}
TUTORIAL_3_AGAIN = {"python -m byoc.examples decoder.onnx --model small_decoder":
                    "decoder.onnx already holds small_decoder\n"}


def test_tutorial_03_runs_as_written_and_again_over_its_own_files(tmp_path):
    readme = TUTORIAL_3 / "README.md"
    run_twice_in_a_repository(readme, TUTORIAL_3_SH, ["decoder.onnx"], tmp_path, again=TUTORIAL_3_AGAIN)
    for printed in TUTORIAL_3_AGAIN.values():
        assert f"`{printed.strip()}`" in readme.read_text(), "the README says what a second run prints"


# -- tutorial 4: an NPU with ordinary limits ---------------------------------------------------
TUTORIAL_4_SH = {"rm -f small_cnn.onnx"}


def test_tutorial_04_runs_as_written_and_again_over_its_own_files(s390x_toolchain, tmp_path):
    # The second run is over its own files: the cache is the script's own.
    run_twice_in_a_repository(TUTORIAL_4 / "README.md", TUTORIAL_4_SH, ["small_cnn.onnx"], tmp_path)


def test_the_npu_is_as_short_and_as_plain_as_tutorial_4_says():
    """Under 300 lines of vendor code, no module globals but constants, no import from byoc's internals."""
    files = sorted((TUTORIAL_4 / "npu").glob("*.py"))
    lines = sum(len(f.read_text().splitlines()) for f in files)
    assert lines < 300 and "under 300 lines" in (TUTORIAL_4 / "README.md").read_text()
    for source in files:
        text = source.read_text()
        assert "global " not in text
        imported = set(re.findall(r"^from (byoc[\w.]*) import", text, re.M))
        assert imported <= {"byoc.vendor", "byoc.vendor.checks", "byoc.vendor.abi"}, (source.name, imported)


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=byoc", "-c", "user.email=byoc@example.invalid", "-C", str(root),
                           *args], capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    assert done.returncode == 0, done.stderr
    return done.stdout


def run_twice_in_a_repository(readme: Path, sh: set[str], outputs: list[str], tmp_path: Path,
                              again: dict[str, str] | None = None) -> None:
    """Run ``readme`` as written, then again over its own files, where it says, in a git repository holding the
    tutorials: after each run git sees nothing new and ``outputs`` are in the tutorial's folder, not the
    repository root; the README's one ``rm`` command then deletes every file it wrote."""
    root = tutorials_copy(tmp_path / "clone")
    git = shutil.which("git") is not None  # without git, the runs are checked and the status is not
    if git:
        for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "tutorials"]):
            _git(root, *args)
    workdir = workdir_of(readme, root)
    for run_again in (None, again or {}):
        run_tutorial(readme, workdir, sh, run_again)
        assert not git or _git(root, "status", "--porcelain", "--untracked-files=all") == ""
        assert all((workdir / name).exists() for name in outputs), "the outputs are in the tutorial's folder"
        assert not any((root / name.split("/")[0]).exists() for name in outputs), "and not in the repository root"
    cleanup = [line for line in sh if line.startswith("rm ")]
    assert len(cleanup) == 1 and f"\n{cleanup[0]}\n" in readme.read_text(), "the README says how to delete them"
    _run(cleanup[0], workdir, shell=True)
    assert not git or _git(root, "status", "--porcelain", "--ignored", "--untracked-files=all") == ""


DEPLOY = TUTORIAL_2 / "deploy_s390x.py"


def _deploy(*args, cwd, path=None):
    env = _env() if path is None else {**os.environ, "PATH": path}
    return subprocess.run([sys.executable, str(DEPLOY), *args], cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=COMMAND_TIMEOUT)


def test_tutorial_02_refuses_a_mistyped_model_and_writes_nothing(tmp_path):
    done = _deploy("smal_cnn.onnx", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == "deploy_s390x.py: error: model file not found: 'smal_cnn.onnx'; check the path"
    assert list(tmp_path.iterdir()) == []


def test_tutorial_02_keeps_a_users_file_named_like_the_example(tmp_path):
    (tmp_path / "small_cnn.onnx").write_bytes(b"mine")
    done = _deploy(cwd=tmp_path)
    assert done.returncode == 2 and "already exists and is not the small_cnn example" in done.stderr
    assert (tmp_path / "small_cnn.onnx").read_bytes() == b"mine"


def test_tutorial_02_without_the_cross_toolchain_names_every_missing_package(tmp_path):
    done = _deploy(cwd=tmp_path, path=str(Path(sys.executable).parent))  # python only: no gcc, make or qemu
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("deploy_s390x.py: error: the C compiler for s390x"), lines
    assert "apt-get update && apt-get install -y --no-install-recommends gcc-s390x-linux-gnu" in lines[0]
    assert "qemu-user" in lines[0] and "Traceback" not in done.stderr


# -- the project README and docs/ops.md --------------------------------------------------------
OPTABLE_VENDORS = ("c_source", "json_runtime", "dnnl")
OPS_PAGE = REPO / "docs" / "ops.md"


def test_ops_page_op_table_is_generated():
    table = optable.embedded(OPS_PAGE.read_text())
    assert table is not None, "docs/ops.md has no <!-- optable:begin --> ... <!-- optable:end --> section"
    assert table == optable.markdown(OPTABLE_VENDORS), (
        "docs/ops.md's op table is stale; regenerate it with "
        f"`python -m byoc.optable --vendor {' '.join(OPTABLE_VENDORS)} --update docs/ops.md`"
    )


def test_optable_update_rewrites_only_the_marked_section(tmp_path):
    page = tmp_path / "ops.md"
    page.write_text("# intro\n\n<!-- optable:begin -->\nstale\n<!-- optable:end -->\n\ntail\n")
    argv = [sys.executable, "-m", "byoc.optable", "--vendor", "c_source", "--update", str(page)]
    assert subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT).returncode == 0
    text = page.read_text()
    assert text.startswith("# intro\n\n") and text.endswith("<!-- optable:end -->\n\ntail\n")
    assert optable.embedded(text) == optable.markdown(["c_source"])
    (tmp_path / "plain.md").write_text("no markers\n")
    argv[-1] = str(tmp_path / "plain.md")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    assert done.returncode == 2 and "has no <!-- optable:begin -->" in done.stderr
    assert (tmp_path / "plain.md").read_text() == "no markers\n"


def test_readme_links_to_the_op_table_and_holds_none():
    text = (REPO / "README.md").read_text()
    assert "(docs/ops.md)" in text and "<!-- optable:begin -->" not in text


def test_optable_reads_constraints_from_checks(toy_npu):
    rows = {rule: (what, constraints) for rule, what, constraints in optable.rule_rows(toy_npu.VENDOR)}
    assert rows["toy_npu.matmul"] == ("relax.matmul", "float32 only; static shapes of rank <= 4; reduction dim K <= 4096")
    assert rows["toy_npu.conv2d_bias_relu"][0] == "relax.nn.relu(relax.add(relax.nn.conv2d(*, *), const))"


def test_readme_setup_commands_are_unchanged():
    text = (REPO / "README.md").read_text()
    assert "pip install . && python -m byoc.examples small_cnn.onnx && python -m byoc.partition small_cnn.onnx --verify" in text
    # The test command is what .ci/run runs: tests/test_packaging.py::test_the_readme_test_command_is_what_ci_runs


def _readme_block_after(heading: str, info: str, nth: int = 0) -> str:
    """The body of the ``nth`` fenced block with info string ``info`` after ``heading`` in README.md."""
    text = (REPO / "README.md").read_text()
    section = text[text.index(heading):]
    found = [body for found_info, body in _BLOCK.findall(section) if found_info.strip() == info]
    return found[nth]


def test_readme_api_example_runs_twice_and_prints_what_the_readme_shows(s390x_toolchain, tmp_path):
    code = _readme_block_after("## The API at a glance", "python")
    shown = _readme_block_after("## The API at a glance", "text")
    _run([sys.executable, "-m", "byoc.examples", "small_cnn.onnx"], tmp_path)
    (tmp_path / "api.py").write_text(code)
    for _ in range(2):  # a second run meets the files of the first
        assert _run([sys.executable, "api.py"], tmp_path) == shown


def test_readme_vendor_example_registers_a_vendor_that_takes_the_small_cnn(tmp_path):
    """The README's 'Writing a vendor' block, run as written, gives a vendor that offloads the small CNN's convs
    and relus."""
    code = _readme_block_after("## Writing a vendor", "python")
    script = code + textwrap.dedent("""
        import byoc, byoc.examples
        plan = byoc.partition(byoc.examples.small_cnn(), vendors=["acme"])
        print(sorted({d.rule for d in plan.decisions.values() if d.rule}))
        """)
    (tmp_path / "vendor.py").write_text(script)
    assert _run([sys.executable, "vendor.py"], tmp_path).strip() == "['acme.conv2d', 'acme.relu']"


def test_readme_cli_sample_is_what_the_first_command_prints(tmp_path):
    shown = _readme_block_after("Output of the\nfirst set-up command:", "")
    _run([sys.executable, "-m", "byoc.examples", "small_cnn.onnx"], tmp_path)
    assert _run([sys.executable, "-m", "byoc.partition", "small_cnn.onnx", "--verify"], tmp_path) == shown
