"""npu: a vendor for an accelerator with ordinary limits (tutorial 4).

float32 convs, matmuls, adds, ReLUs and max pools; static shapes only; a small on-chip SRAM
(``sram_kib``); an external compiler (``npuc.py``, run as a program) whose C runs on x86_64 and s390x.
"""

from npu.rules import VENDOR

__all__ = ["VENDOR"]
