"""``byoc.partition``: the partition function, and the package of its CLI.

This module object is callable: ``byoc.partition(model, vendors, ...)`` runs
:func:`byoc.pipeline.partitioning.partitioner.partition`, while ``python -m byoc.partition`` runs
the CLI in ``__main__``. Making one object serve both means importing the
submodule can never shadow the function (Python sets ``byoc.partition`` to
the submodule whenever it is imported). ``help(byoc.partition)`` and
``inspect.signature(byoc.partition)`` show the function's.
"""

import inspect
import sys
import types
import typing

from byoc.pipeline.partitioning.partitioner import partition as _partition


class _CallableModule(types.ModuleType):
    __signature__: inspect.Signature

    def __call__(self, *args, **kwargs):
        return _partition(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
_module = typing.cast(_CallableModule, sys.modules[__name__])
_module.__signature__ = inspect.signature(_partition)
_module.__doc__ = f"partition{_module.__signature__}\n\n{inspect.getdoc(_partition)}\n\n{inspect.getdoc(_module)}"
