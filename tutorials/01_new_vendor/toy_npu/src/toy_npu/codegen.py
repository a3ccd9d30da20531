"""The toy NPU's codegen: byoc's C-source codegen, limited to the NPU's ops.

Every codegen is a ``byoc.vendor.Codegen``: byoc calls its required
``compile(partitions, options)`` and the optional capabilities it overrides
(``standalone_source``, ``runtime_memory``, ``module_kinds`` with
``load_runtime``); the others keep the interface's defaults. ``CSourceCodegen``
is one, with ``standalone_source`` and ``runtime_memory``.
A real NPU codegen would emit calls into its SDK here; the toy one reuses
byoc's reference C kernels, so its partitions also run in a standalone
(no TVM runtime) build and under qemu. Restricting ``emitters`` makes a rule
that offloads an op the NPU cannot run fail at build time with the op's name,
instead of silently running reference code.
"""

from byoc.codegens.c_source import OP_EMITTERS, CSourceCodegen

# conv2d (with its fused bias and relu) is emitted by the base class itself.
_NPU_OPS = ("relax.matmul", "relax.add", "relax.nn.relu")


class ToyNpuCodegen(CSourceCodegen):
    """C source for the toy NPU's partitions: conv2d, conv + bias + relu, matmul."""

    emitters = {op: OP_EMITTERS[op] for op in _NPU_OPS}

    def source(self, partitions):
        banner = "/* toy_npu: " + ", ".join(p.symbol for p in partitions) + " */\n"
        return banner + super().source(partitions)
