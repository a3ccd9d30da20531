"""byoc: bring your own codegen to Apache TVM.

An ONNX model is imported into Relax, each vendor's rules mark what its
hardware supports, partitions are cut out, vendor codegens compile them, and
TVM's LLVM target builds the rest.

    import byoc
    artifact = byoc.compile("model.onnx", vendors=["c_source"], target="x86_64")
    outputs = artifact.run({"input": x})
    print(artifact.plan.partitions)

Public API: :func:`compile`, :func:`partition`, :func:`annotate`,
:func:`build`, :func:`load`, :func:`import_model`, :func:`report`, :class:`Generator` (generation with a
decoder's KV cache), the vendor registry
(:func:`register_vendor`, :func:`list_vendors`, :func:`get_vendor`), and
what a vendor writes (:class:`Vendor`, :class:`OpRule`, :class:`PatternRule`,
:class:`Codegen`, :class:`VendorOption`).

``byoc.partition`` is both the function and the module behind
``python -m byoc.partition``: the module object is callable, so neither
import order nor running the CLI can make one shadow the other.
"""

from byoc._version import __version__  # noqa: F401 - public
from byoc._tvm_ffi import import_tvm_ffi

import_tvm_ffi()  # before anything imports TVM: see byoc/_tvm_ffi.py


from byoc.errors import *  # noqa: F401,F403 - the typed errors are public API
from byoc.pipeline.frontend import ImportedModel, TensorSpec, import_model, load_model
from byoc.vendor import SUPPORTED, Codegen, Match, OpRule, PatternRule, Vendor, VendorOption
from byoc.vendor.registry import get_vendor, list_vendors, register_vendor, unregister_vendor
from byoc.pipeline.annotate.annotator import Annotation, Decision, annotate
from byoc.pipeline.partitioning.partitioner import Partition, PartitionPlan
from byoc.pipeline.artifact.artifact import Artifact, load
from byoc.pipeline.build.builder import build, compile  # noqa: A004
from byoc.tools.report import report
from byoc.generation import Generator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers see of the callable module: the function it calls
    from byoc.pipeline.partitioning.partitioner import partition
else:
    from byoc import partition  # the callable module, see the docstring
from byoc import _moved

_moved.install()

__all__ = [
    "Annotation", "Artifact", "Codegen", "Decision", "Generator", "ImportedModel", "Match", "OpRule", "Partition",
    "PartitionPlan", "PatternRule", "SUPPORTED", "TensorSpec", "Vendor", "VendorOption", "annotate", "build",
    "compile", "get_vendor", "import_model", "list_vendors", "load", "load_model", "partition",
    "register_vendor", "report", "unregister_vendor",
]
