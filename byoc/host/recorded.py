"""Facts a build keeps inside its program, for a run or a report to read back: each a Relax function that takes
nothing and returns JSON text (the artifact's metadata, the host calls of a profile, what a run may share with
its caller). A Relax function is what an exported VM library carries and answers by name, on every target."""

from __future__ import annotations

from typing import Any

#: the function that returns an artifact's metadata (inputs, outputs, target, partitions): what makes a TVM
#: library a byoc artifact, for :func:`byoc.load` and for the frontend, which names an artifact given as a model
METADATA_FUNCTION = "byoc_metadata"


def text_function(name: str, text: str):
    """The Relax function ``name`` that returns ``text``, exported under that symbol."""
    import tvm
    from tvm import relax

    value = tvm.ir.expr.StringImm(text)
    return relax.Function([], value, value.ty).with_attr("global_symbol", name)


def read_json(vm, name: str) -> Any:
    """The JSON value the program's function ``name`` returns, or None when the program has no such function (a
    program of an older byoc, or one built without the step that records it)."""
    import json

    try:
        found = vm[name]
    except (AttributeError, KeyError, RuntimeError):
        return None
    return json.loads(str(found()))
