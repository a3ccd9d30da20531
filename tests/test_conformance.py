"""Conformance on a CI-sized subset of the ONNX backend node tests.

The cases are the ones for ops the built-in vendors take (so byoc really
offloads), chosen deterministically. Every case that plain TVM passes must
pass with byoc too; ``python -m byoc.conformance`` runs all of them.
"""

from __future__ import annotations

import pytest

from byoc.conformance import collect_cases, run_cases

# ONNX ops the c_source / json_runtime rules cover (after TVM's import).
PREFIXES = (
    "test_add", "test_sub", "test_mul", "test_div", "test_relu", "test_sigmoid", "test_tanh", "test_clip",
    "test_maxpool_2d", "test_averagepool_2d", "test_reduce_mean", "test_softmax", "test_reshape",
    "test_concat", "test_transpose", "test_matmul", "test_conv_", "test_gemm", "test_flatten",
)
SUBSET = 100


def subset() -> list:
    cases = [c for c in collect_cases() if c[0].startswith(PREFIXES)]
    step = max(1, len(cases) / SUBSET)
    return [cases[int(i * step)] for i in range(min(SUBSET, len(cases)))]


@pytest.fixture(scope="module")
def summary():
    return run_cases(subset(), jobs=2, timeout=180)


def test_no_case_passes_plain_but_fails_byoc(summary):
    print("\n" + summary.table())
    assert [(r.name, r.byoc_error) for r in summary.regressions] == []


def test_enough_cases_pass_and_are_offloaded(summary):
    assert summary.total == SUBSET
    assert summary.passed_plain >= 0.6 * summary.total
    assert summary.passed_byoc >= summary.passed_plain
    assert summary.offloaded >= 0.4 * summary.total
