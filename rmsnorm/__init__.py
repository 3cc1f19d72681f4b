"""rmsnorm: an exact, fast RMSNorm written in Triton, usable from PyTorch and C/C++."""

import sys as _sys

import triton as _triton

from rmsnorm import reference
from rmsnorm.integrations.hf import patch_hf, patched, unpatch
from rmsnorm.launch import interpreter_compat as _interpreter_compat
from rmsnorm.launch import triton_versions as _triton_versions
from rmsnorm.launch.triton_versions import UntestedTritonWarning
from rmsnorm.pytorch.functional import fused_add_rms_norm, rms_norm
from rmsnorm.pytorch.modules import GemmaRMSNorm, RMSNorm
from rmsnorm.pytorch.quant import QuantOutput, fused_add_rms_norm_quant, rms_norm_quant
from rmsnorm.pytorch.status import status, use_compiled_kernels

_triton_versions.check(_triton.__version__)  # once: a Triton outside the tested range
_interpreter_compat.apply()  # before any kernel runs: the interpreter fixes this Triton needs

if "torch.distributed.tensor" in _sys.modules:
    # DTensor is loaded already, so registering the sharding rules costs little now (else
    # rmsnorm does it on the first DTensor it sees, sparing others the import).
    from rmsnorm.integrations import dtensor  # noqa: F401

__all__ = ["rms_norm", "fused_add_rms_norm", "rms_norm_quant", "fused_add_rms_norm_quant",
           "QuantOutput", "RMSNorm", "GemmaRMSNorm", "reference",
           "patch_hf", "unpatch", "patched", "status", "use_compiled_kernels",
           "UntestedTritonWarning"]
__version__ = "0.1.0"
