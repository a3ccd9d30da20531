"""The distribution name is ours, and every install hint and dependency line in the repo uses it.

``byoc`` on the package registry (PyPI) is an unrelated project, so byoc's
distribution has another name (``[project] name`` in pyproject.toml; the
import name stays ``byoc``). ``pip install "byoc[dnnl]"`` or a vendor package
with ``dependencies = ["byoc"]`` would fetch that other project. These tests
read the name from pyproject.toml and fail, naming file and line, on any
install hint (``pip install/download/wheel/index``), extra or requirement that
names ``byoc`` instead. ``byoc[dnnl]`` as a benchmark label (byoc with the dnnl
vendor, in a table or a result key) is neither, and is left alone.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
NAME = PYPROJECT["project"]["name"]
#: Names on the registry that belong to other projects (checked with ``pip index versions``).
TAKEN = {"byoc"}
OLD = "byoc"  # the name this project's distribution had before, and the import name

SCANNED_DIRS = ("byoc", "codegens", "annotations", "tutorials", "docs", "benchmarks")
SCANNED_FILES = ("README.md", "pyproject.toml", "setup.py", ".ci/run")
SUFFIXES = {".py", ".md", ".toml", ".cfg", ".txt"}
SKIPPED_PARTS = {"__pycache__", "build", "dist", ".git"}


def normalized(name: str) -> str:
    """A project name as the registry compares names (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def scanned_files() -> list[Path]:
    found: dict[Path, Path] = {}  # by resolved path: byoc/codegens and byoc/annotations are symlinks
    for folder in SCANNED_DIRS:
        for path in sorted((ROOT / folder).rglob("*")):
            if (path.suffix in SUFFIXES and path.is_file()
                    and not SKIPPED_PARTS & set(path.relative_to(ROOT).parts)
                    and not any(part.endswith(".egg-info") for part in path.parts)):
                found.setdefault(path.resolve(), path)
    for name in SCANNED_FILES:
        if (ROOT / name).is_file():
            found.setdefault((ROOT / name).resolve(), ROOT / name)
    return sorted(found.values())


# A requirement naming the old name: byoc, byoc[extra], byoc>=1, "byoc ; python_version...", byoc@url.
_OLD_REQUIREMENT = re.compile(rf"^{OLD}\s*(\[[^\]]*\])?\s*([<>=!~;@].*)?$", re.I)
_PIP = re.compile(r"\bpip3?\s+(?:install|download|wheel|index\s+versions)\b(?P<rest>[^\n]*)")
_QUOTED_OLD = re.compile(rf"""["'`]{OLD}(\[[^\]]*\])?\s*([<>=!~;][^"'`]*)?["'`]""", re.I)
_LOOKUP = re.compile(rf"""\b(?:version|distribution|metadata|requires|files)\(\s*["']{OLD}["']\s*\)""")


def _pip_arguments(rest: str) -> list[str]:
    """The words of a pip command up to where the shell command, the code span or the string ends."""
    rest = re.split(r"&&|\|\||[|;`]|\)(?!\S)|\$\(", rest)[0]
    return [word.strip("\"'`,()") for word in rest.split()]


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def offences(path: Path) -> list[str]:
    """``file:line: text`` for each install hint, extra or requirement in ``path`` that names byoc, not NAME."""
    found = []
    lines = path.read_text(errors="replace").splitlines()
    for number, line in enumerate(lines, 1):
        why = None
        for pip in _PIP.finditer(line):
            if any(_OLD_REQUIREMENT.match(word) for word in _pip_arguments(pip["rest"])):
                why = "an install command names it"
        if why is None and re.search(rf"(?<![\w.-]){OLD}\[", line) and re.search(r"\bextras?\b", line, re.I):
            why = "an extra is given under its name"
        if why is None and _QUOTED_OLD.search(line) and re.search(
                r"\b(dependencies|requires|install_requires|requirements?)\b", line, re.I):
            why = "a dependency names it"
        if why is None and _LOOKUP.search(line):
            why = "a metadata lookup names it"
        if why is None and path.name.startswith("requirements") and path.suffix == ".txt" \
                and _OLD_REQUIREMENT.match(line.split("#")[0].strip()):
            why = "a requirements file names it"
        if why:
            found.append(f"{_shown(path)}:{number}: {why}: {line.strip()}")
    return found


def _toml_requirements(text: str) -> list[str]:
    """Every requirement string of a pyproject: build requires, dependencies, optional dependencies."""
    data = tomllib.loads(text)
    project = data.get("project", {})
    return [*data.get("build-system", {}).get("requires", []), *project.get("dependencies", []),
            *(r for group in project.get("optional-dependencies", {}).values() for r in group)]


def _toml_texts(path: Path) -> list[str]:
    """A .toml file's text, or the ```toml blocks of a Markdown file (those that parse on their own)."""
    text = path.read_text(errors="replace")
    if path.suffix == ".toml":
        return [text]
    return re.findall(r"^```toml[^\n]*\n(.*?)^```", text, flags=re.S | re.M) if path.suffix == ".md" else []


def requirement_offences(path: Path) -> list[str]:
    """Requirements of pyproject files (and toml examples in docs) named byoc, wherever the array's lines are."""
    found = []
    for text in _toml_texts(path):
        try:
            requirements = _toml_requirements(text)
        except (tomllib.TOMLDecodeError, AttributeError, TypeError):
            continue  # an excerpt that is not a whole file; the line checks still read it
        for requirement in requirements:
            if isinstance(requirement, str) and _OLD_REQUIREMENT.match(requirement.strip()):
                lines = path.read_text(errors="replace").splitlines()
                number = next((i for quoted in (f'"{requirement}"', f"'{requirement}'", requirement)
                               for i, line in enumerate(lines, 1) if quoted in line), 0)
                found.append(f"{_shown(path)}:{number}: a requirement names it: {requirement!r}")
    return found


# -- the name -----------------------------------------------------------------------------------
def test_the_distribution_name_is_not_one_the_registry_gives_to_another_project():
    assert normalized(NAME) not in TAKEN, (
        f"pyproject.toml names the distribution {NAME!r}, which is another project's on PyPI "
        f"(`pip install {NAME}` would install that one)")


def test_every_install_hint_and_dependency_names_the_distribution():
    files = scanned_files()
    assert len(files) > 50 and ROOT / "README.md" in files  # the scan reads the repo, not an empty list
    found: dict[str, str] = {}  # file:line -> the first reason found for it
    for path in files:
        for offence in (*offences(path), *requirement_offences(path)):
            found.setdefault(offence.split(": ", 1)[0], offence)
    assert not found, (f"these name the distribution {OLD!r} (on PyPI an unrelated project) instead of {NAME!r}:\n"
                       + "\n".join(found.values()))


@pytest.mark.parametrize("line, bad", [
    ('pip install "byoc[dnnl]"', True), ("pip install -U byoc", True), ("pip install byoc==0.1.0", True),
    ("`pip install byoc` first", True), ('dependencies = ["byoc"]', True), ("requires = ['byoc>=0.1']", True),
    ("the package extra ``byoc[dnnl]``", True), ('metadata.version("byoc")', True),
    (f'pip install "{NAME}[dnnl]"', False), (f'dependencies = ["{NAME}"]', False), ("pip install .", False),
    ('pip install -e ".[test,dnnl]" && python -m pytest -q', False), ("| model | byoc[dnnl] |", False),
    ('key = f"byoc[{vendor_set}]"', False), ("pip uninstall -y byoc", False), ("import byoc", False),
    ('[project.entry-points."byoc.vendors"]', False), ("pip install byoc-toy-npu", False),
])
def test_the_scan_tells_an_install_hint_from_a_label(tmp_path, line, bad):
    sample = tmp_path / "sample.md"
    sample.write_text(line + "\n")
    assert bool(offences(sample) or requirement_offences(sample)) is bad


def test_the_extras_the_hints_name_exist():
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert {"dnnl", "test"} <= set(extras)  # byoc-tvm[dnnl] in the dnnl error; .[test,dnnl] in the README


def test_the_missing_onednn_error_names_the_distribution(monkeypatch):
    from byoc.codegens import dnnl
    from byoc.errors import BuildError

    real = dnnl.metadata.distribution

    def distribution(name):
        if name == dnnl.LIBRARY_DIST:
            raise dnnl.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(dnnl.metadata, "distribution", distribution)
    with pytest.raises(BuildError) as caught:
        dnnl.onednn_library()
    assert f'pip install "{NAME}[dnnl]"' in str(caught.value)


def test_the_readme_test_command_is_what_ci_runs():
    readme = re.findall(r"```sh\n(.*?)\n```", (ROOT / "README.md").read_text(), flags=re.S)
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.startswith(("#", "set ", "cd "))]
    # It runs the README's test command last; before it, only the removal of a pre-rename `byoc` install.
    assert ci[-1].replace("python -m pip ", "pip ") == readme[1], ci
    assert all("pip uninstall -y byoc;" in line for line in ci[:-1]), ci


# -- what is installed --------------------------------------------------------------------------
def _where(dist: importlib.metadata.Distribution) -> str:
    return str(getattr(dist, "_path", "?"))  # the dist-info / egg-info folder (a private attribute, for the message)


def _fix(dist: importlib.metadata.Distribution) -> str:
    where = Path(_where(dist)).absolute()
    if where.suffix == ".egg-info" and "site-packages" not in where.parts:
        return f"delete {where} (an old build's leftover in a source tree, found when Python runs from there)"
    return f"`pip uninstall -y {dist.metadata['Name']}` first ({where})"


def test_the_installed_byoc_package_comes_from_this_distribution_alone():
    """The metadata of the installed package is named as pyproject.toml says, and no other dist ships ``byoc``.

    An install made before the rename is a distribution named ``byoc`` that
    ships the same package: installed side by side, an old editable install can
    be the one imported, and uninstalling it afterwards deletes files the new
    one shares (``byoc/__init__.py``, the ``byoc-partition`` script). An old
    ``byoc.egg-info`` in the source tree is found too when Python runs from there.
    """
    providers = importlib.metadata.packages_distributions().get("byoc")
    if not providers:
        pytest.skip("byoc is not installed here (run from the source tree); nothing to compare")
    others = [dist for dist in importlib.metadata.distributions()
              if normalized(dist.metadata["Name"] or "") in {normalized(n) for n in providers} - {normalized(NAME)}]
    assert not others and normalized(NAME) in {normalized(n) for n in providers}, (
        f"the package byoc is provided by {sorted(set(providers))}, but pyproject.toml names {NAME!r}: "
        + "".join(f"{_fix(dist)}; " for dist in others)
        + "then install from the source tree (`pip install -e .` or `pip install .`)")
    assert normalized(importlib.metadata.metadata(NAME)["Name"]) == normalized(NAME)
