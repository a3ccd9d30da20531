"""The ``slow`` mark: modules whose tests build real models, fresh venvs, tutorials, cross programs or many
timing processes. ``python -m pytest -q -m "not slow"`` is the quick subset to run while working (README);
CI runs everything."""

from __future__ import annotations

import pytest

SLOW_MODULES = frozenset({
    "test_first_run", "test_real_models", "test_properties", "test_benchmarks", "test_tutorials",
    "test_conformance", "test_threads", "test_quantized_dnnl", "test_cross",
})


def pytest_collection_modifyitems(items):
    for item in items:
        if item.module is not None and item.module.__name__ in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
