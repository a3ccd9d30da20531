"""Where each tensor of a partition graph is computed and read: what the rewrites of a form spelled as several ops
(``rms_norm.py``, ``rotary.py``) ask before they replace it by one op."""

from __future__ import annotations

from typing import Optional

from byoc.vendor.graph import PartitionGraph, Tensor


class OpIndex:
    """The op positions of ``graph`` that compute and read each tensor (by id)."""

    def __init__(self, graph: PartitionGraph):
        self.readers: dict[int, list[int]] = {}
        for index, call in enumerate(graph.ops):
            for t in call.inputs:
                self.readers.setdefault(t.id, []).append(index)
        self.outputs = {t.id for t in graph.outputs}
        self.producer = {call.output.id: index for index, call in enumerate(graph.ops)}

    def only_reader(self, tensor: Tensor) -> Optional[int]:
        """The position of the one op reading ``tensor``, when nothing else reads it (a partition output either);
        else None: a rewrite that removes ``tensor`` would take it from its other readers."""
        found = self.readers.get(tensor.id, [])
        return found[0] if len(found) == 1 and tensor.id not in self.outputs else None
