"""rmsnorm: an exact, fast RMSNorm written in Triton, usable from PyTorch and C/C++."""

from rmsnorm import reference
from rmsnorm.modules import GemmaRMSNorm, RMSNorm
from rmsnorm.functional import fused_add_rms_norm, rms_norm
from rmsnorm.patch import patch_hf, patched, unpatch

__all__ = ["rms_norm", "fused_add_rms_norm", "RMSNorm", "GemmaRMSNorm", "reference",
           "patch_hf", "unpatch", "patched"]
__version__ = "0.1.0"
