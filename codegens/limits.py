"""Limits the reference runtimes share, read from their one source: ``c_source/byoc_kernels.h``.

The C kernels (pasted into every c_source partition and compiled into the
JSON runtime), the graph runtimes' parser (``graph_runtime/graph.h``: ``setup.py``
passes this value as ``-DBYOC_MAX_RANK``) and the vendors' rules
(``annotations/*.py``) must agree on the largest rank a tensor may have. It is
written once, as ``#define BYOC_MAX_RANK`` in the kernels' header; everything
else reads it from there. This module imports nothing of byoc, so ``setup.py``
can load it by path before byoc is installed.
"""

from __future__ import annotations

import re
from pathlib import Path

KERNELS_HEADER = Path(__file__).resolve().parent / "c_source" / "byoc_kernels.h"


def defined_int(name: str, header: Path = KERNELS_HEADER) -> int:
    """The integer ``header`` gives ``name`` with ``#define NAME <int>``."""
    found = re.search(rf"^#define {name} (\d+)$", header.read_text(), flags=re.M)
    if found is None:
        raise LookupError(f"{header} defines no integer {name}")
    return int(found.group(1))


#: the largest rank of a tensor the reference kernels, the graph runtimes and the in-tree vendors' rules take
MAX_RANK = defined_int("BYOC_MAX_RANK")
