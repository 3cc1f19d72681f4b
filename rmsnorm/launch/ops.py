"""The launcher's entry points, which rmsnorm.pytorch (the public API and its autograd)
calls: the forward (rmsnorm.launch.forward), the backward (rmsnorm.launch.backward) and the
quantized forward (rmsnorm.launch.quant). The layers under them: rmsnorm.launch.specs picks
and prepares the kernel, rmsnorm.launch.tensors handles the tensors around a launch,
rmsnorm.launch.device answers what the device is."""

from rmsnorm.launch.backward import backward  # noqa: F401
from rmsnorm.launch.device import INTERPRETED  # noqa: F401
from rmsnorm.launch.forward import forward  # noqa: F401
