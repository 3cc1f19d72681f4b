"""rmsnorm: an exact, fast RMSNorm written in Triton, usable from PyTorch and C/C++."""

import sys as _sys

from rmsnorm import reference
from rmsnorm.integrations.hf import patch_hf, patched, unpatch
from rmsnorm.launch import interpreter_compat as _interpreter_compat
from rmsnorm.pytorch.functional import fused_add_rms_norm, rms_norm
from rmsnorm.pytorch.modules import GemmaRMSNorm, RMSNorm
from rmsnorm.pytorch.quant import QuantOutput, fused_add_rms_norm_quant, rms_norm_quant
from rmsnorm.pytorch.status import status, use_compiled_kernels

_interpreter_compat.apply()  # before any kernel runs: Triton 3.6's interpreter, numpy >= 2.4

if "torch.distributed.tensor" in _sys.modules:
    # DTensor is loaded already, so registering the sharding rules costs little now (else
    # rmsnorm does it on the first DTensor it sees, sparing others the import).
    from rmsnorm.integrations import dtensor  # noqa: F401

__all__ = ["rms_norm", "fused_add_rms_norm", "rms_norm_quant", "fused_add_rms_norm_quant",
           "QuantOutput", "RMSNorm", "GemmaRMSNorm", "reference",
           "patch_hf", "unpatch", "patched", "status", "use_compiled_kernels"]
__version__ = "0.1.0"
