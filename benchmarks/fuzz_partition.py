"""Fuzz the partitioner: the property of tests/test_properties.py on many more random graphs.

    python benchmarks/fuzz_partition.py [--examples 500] [--seed 0]

Random DAGs of supported and unsupported ops, random vendor mixes and
policies; each must give a cycle-free plan whose byoc build equals plain
TVM. Reproducible: the same --seed explores the same graphs. Prints the
counts (graphs, partitions, vendors used) and exits 1 on a failure, after
hypothesis has shrunk it to a small example. Graphs that plain TVM itself
cannot build (a TVM bug) are skipped and counted.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from hypothesis import given, seed, settings  # noqa: E402

from hypothesis import reject  # noqa: E402
from test_properties import PROPERTY_SETTINGS, PlainTvmFailed, cases, check_graph  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    counts: collections.Counter = collections.Counter()
    failures_of_tvm: set[str] = set()

    options = {**PROPERTY_SETTINGS, "derandomize": False}

    @seed(args.seed)
    @settings(max_examples=args.examples, **options)
    @given(cases())
    def fuzz(case):
        model, feeds, vendors, min_ops, keep = case
        try:
            plan = check_graph(model, feeds, vendors, min_ops, keep)
        except PlainTvmFailed as err:  # a TVM bug: nothing to compare byoc with
            counts["plain TVM failed to build (skipped)"] += 1
            failures_of_tvm.add(str(err)[:120])
            reject()
        counts["graphs"] += 1
        counts["nodes"] += len(model.graph.node)
        counts["partitions"] += len(plan.partitions)
        counts["graphs with >=1 partition"] += bool(plan.partitions)
        counts["graphs with >=2 vendors used"] += len({p.vendor for p in plan.partitions}) >= 2
        counts["host ops"] += len(plan.host_ops)
        counts["offloaded ops"] += plan.offloaded_ops

    start = time.monotonic()
    failed = False
    try:
        fuzz()
    except Exception as err:  # noqa: BLE001 - hypothesis re-raises the shrunk failure, of any type
        failed = True
        print(f"FAILED: {type(err).__name__}: {err}")
    for key, value in counts.items():
        print(f"{key:<30} {value}")
    for text in sorted(failures_of_tvm):
        print(f"plain TVM failed: {text}")
    print(f"seed {args.seed}, {time.monotonic() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
