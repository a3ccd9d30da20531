"""``byoc.partition``: the partition function, and the package of its CLI.

This module object is callable: ``byoc.partition(model, vendors, ...)`` runs
:func:`byoc.partitioner.partition`, while ``python -m byoc.partition`` runs
the CLI in ``__main__``. Making one object serve both means importing the
submodule can never shadow the function.
"""

import sys
import types

from ..partitioner import partition as _partition


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        return _partition(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
