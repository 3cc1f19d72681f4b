"""The launcher of the quantized forward (rms_norm_quant, fused_add_rms_norm_quant): its
argument checks, its outputs and its epilogue's kernel arguments; the launch itself is the
forward's (rmsnorm.launch.forward.launch_forward), with the epilogue's kernels of the same
family."""

import dataclasses

import torch
import triton.language as tl

from rmsnorm.launch import configs, contract, quant_contract, specs, validation as v
from rmsnorm.launch.device import INTERPRETED
from rmsnorm.launch.forward import forward_recipe, launch_forward
from rmsnorm.launch.tensors import alloc, resolved
from rmsnorm.kernels import quantize as q

TRITON_DTYPES = {torch.float8_e4m3fn: tl.float8e4nv, torch.float8_e5m2: tl.float8e5,
                 torch.int8: tl.int8}
INPUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# Each mode's name in the launch rules, by its kernels' code.
SCALES = dict(enumerate(configs.QUANTIZED_SCALES, start=q.STATIC))


@dataclasses.dataclass(frozen=True)
class Epilogue:
    """What the quantized kernels take beyond the forward's: their constexprs (`quantized`,
    a key of the launcher's caches), the scale tensors and the unquantized output."""
    quantized: specs.Quantized
    scale: torch.Tensor  # static: read; dynamic: the scales written
    scale_ub: torch.Tensor
    unquantized: torch.Tensor
    groups: int  # scales per row (dynamic modes)
    transposed: bool
    ue8m0: bool

    stores_unquantized: bool = True

    def pointers(self, y):
        return (self.scale, self.scale_ub if self.scale_ub is not None else self.scale,
                self.unquantized if self.unquantized is not None else y)

    def scalars(self, rows):
        """The run-time arguments after the row strides: the scales' (row, group) strides
        (a (rows, groups) tensor, or its transpose), then store_unq, has_ub and ue8m0."""
        strides = (1, rows) if self.transposed else (self.groups, 1)
        return (*strides, int(self.stores_unquantized), int(self.scale_ub is not None),
                int(self.ue8m0))


def check(x, quant_dtype, scale, group_size, scale_ub, ue8m0, transposed_scales,
          quantizer="vllm"):
    """The quantization arguments, each error naming its argument."""
    if quant_dtype not in quant_contract.QUANT_DTYPES:
        raise TypeError(f"quant_dtype {quant_dtype} is not supported; supported: "
                        "torch.float8_e4m3fn, torch.float8_e5m2, torch.int8")
    if x.dtype not in INPUT_DTYPES:
        raise TypeError(f"x has dtype {x.dtype}; the quantized forward takes float32, float16 "
                        "and bfloat16")
    for name, t in (("scale", scale), ("scale_ub", scale_ub)):
        if t is None:
            continue
        # Its own dtype first: check_tensor's message lists the norm's dtypes, not float32.
        if isinstance(t, torch.Tensor) and (t.dtype != torch.float32 or t.numel() != 1):
            raise ValueError(f"{name} must be a float32 tensor of one element, got "
                             f"{t.dtype} of shape {tuple(t.shape)}")
        v.check_tensor(name, t, device=x.device)
    if scale is not None and group_size is not None:
        raise ValueError("scale (static quantization) and group_size (dynamic per-group) "
                         "exclude each other")
    if scale_ub is not None:
        if quant_dtype == torch.int8:
            raise ValueError("scale_ub bounds dynamic fp8 scales; int8 takes none")
        if scale is not None:
            raise ValueError("scale_ub bounds dynamic scales; static quantization (scale) "
                             "takes none")
        if group_size is not None and quantizer != "vllm_fused":
            raise ValueError("scale_ub with group_size bounds per-group scales as vLLM's "
                             "fused rms_norm_per_block_quant does: give quantizer="
                             "'vllm_fused' (or recipe='vllm'); the default quantizer, vLLM's "
                             "group quantizer, takes no bound")
    if group_size is not None:
        if type(group_size) is not int or group_size not in quant_contract.GROUP_SIZES:
            raise ValueError(f"group_size must be one of {quant_contract.GROUP_SIZES} or None, "
                             f"got {group_size!r}")
        if x.shape[-1] % group_size:
            raise ValueError(f"group_size {group_size} does not divide the last dimension of "
                             f"x ({x.shape[-1]})")
    for name, flag in (("ue8m0", ue8m0), ("transposed_scales", transposed_scales)):
        if type(flag) is not bool:
            raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")
        if flag and group_size is None:
            raise ValueError(f"{name}=True is for per-group scales; give group_size")


def mode(scale, group_size):
    if scale is not None:
        return q.STATIC
    return q.TOKEN if group_size is None else q.GROUP


def scales_like(x, groups, transposed, alloc):
    """The dynamic scales: x.shape[:-1] + (groups,) in fp32, row-major or (transposed) the
    memory of a (groups, rows) tensor seen through a transpose."""
    lead = tuple(x.shape[:-1])
    if not transposed:
        return alloc(lead + (groups,), torch.float32, x.device)
    s = alloc((groups,) + lead, torch.float32, x.device)
    return s.permute(*range(1, len(lead) + 1), 0)


def forward_quant(x, weight=None, eps=1e-6, *, offset=0.0, casting_mode="llama", residual=None,
                  inplace=False, quant_dtype=torch.float8_e4m3fn, scale=None, group_size=None,
                  scale_ub=None, ue8m0=False, transposed_scales=False, return_unquantized=False,
                  launch=None, normalized_sum="rounded", quantizer="vllm"):
    """(out, scales, residual_out, unquantized): the forward's y (rms_norm's, or the fused
    add's) quantized. scales is `scale` itself for static quantization; residual_out None
    without a residual; unquantized (y itself) None unless return_unquantized. `launch` (a
    configs.Launch, tile or loop) replaces the table's choice, as in ops.forward;
    normalized_sum as there; quantizer: whose formulas (quant_contract.quantize's)."""
    v.check_x(x)
    v.check_quantizer(quantizer)
    check(x, quant_dtype, scale, group_size, scale_ub, ue8m0, transposed_scales, quantizer)
    device, n = x.device, x.shape[-1]
    v.check_weight(weight, n, device)
    fused = residual is not None
    if fused:
        v.check_same_shape("residual", residual, x, device)
        if residual.dtype not in INPUT_DTYPES:
            raise TypeError(f"residual has dtype {residual.dtype}; the quantized forward "
                            "takes float32, float16 and bfloat16")
    elif inplace:
        raise ValueError("inplace=True needs a residual tensor to update")
    v.check_scalars(eps, offset, casting_mode, weight)
    v.check_normalized_sum(normalized_sum, fused)
    if weight is not None and weight.dtype not in INPUT_DTYPES:
        raise TypeError(f"weight has dtype {weight.dtype}; the quantized forward takes "
                        "float32, float16 and bfloat16")
    if inplace:
        v.check_writable("residual (updated in place)", residual)
        v.check_no_partial_alias("residual (updated in place)", residual, "x", x)
        for name, t in (("weight", weight), ("scale", scale), ("scale_ub", scale_ub)):
            v.check_disjoint("residual (updated in place)", residual, name, t,
                             ", which every row reads")
    x, weight, scale, scale_ub = (resolved(t) for t in (x, weight, scale, scale_ub))
    if fused and not inplace:
        residual = resolved(residual)

    norm_dtype = residual.dtype if fused else x.dtype
    y_dtype = contract.output_dtype(norm_dtype, weight, casting_mode)
    how = mode(scale, group_size)
    groups = n // group_size if how == q.GROUP else 1
    out = alloc(x.shape, quant_dtype, device)
    scales = scale if how == q.STATIC else scales_like(x, groups, transposed_scales, alloc)
    unquantized = alloc(x.shape, y_dtype, device) if return_unquantized else None
    residual_out = residual if inplace else \
        (alloc(x.shape, residual.dtype, device) if fused else None)
    if x.numel() == 0:
        return out, scales, residual_out, unquantized
    if device.type == "cpu" and not INTERPRETED:
        _recipe(x, residual, weight, eps, offset, casting_mode, quant_dtype, scale, group_size,
                scale_ub, ue8m0, y_dtype, out, scales, residual_out, unquantized,
                normalized_sum, quantizer)
        return out, scales, residual_out, unquantized

    rows = x.numel() // n
    if transposed_scales and (groups - 1) * rows >= 2 ** 31:
        # The kernels form a group's scale offset (group * rows) in 32 bits.
        raise NotImplementedError(f"rmsnorm: transposed scales of {rows} rows and {groups} "
                                  "groups put offsets past 2^31: not supported")
    soft_fp8 = INTERPRETED and quant_dtype != torch.int8
    quantized = specs.Quantized(how, TRITON_DTYPES[quant_dtype], group_size or 0,
                                quantizer == "vllm_fused")
    epilogue = Epilogue(quantized, scales, scale_ub, unquantized, groups, transposed_scales, ue8m0)
    launch = _launch_for(x, residual, weight, how, group_size, launch)
    # y's place in the forward: out (its bits as uint8 where the interpreter has no fp8).
    y = out.view(torch.uint8) if soft_fp8 else out
    if unquantized is None:
        # The kernels' UNQ pointer takes y's dtype from it: a stand-in of that dtype, never
        # written (store_unq is 0).
        epilogue = dataclasses.replace(epilogue, unquantized=alloc((1,), y_dtype, device),
                                       stores_unquantized=False)
    launch_forward(x, residual, weight, eps, offset, casting_mode, y, residual_out, None, launch,
                   epilogue, normalized_sum == "fp32")
    return out, scales, residual_out, unquantized


def _launch_for(x, residual, weight, how, group_size, launch):
    """The forward's launch from the table in its quantized form (configs.quantized_rule;
    tile or looped: the quantized kernels have no split forward), or the caller's; a group
    must not straddle two tiles."""
    n = x.shape[-1]
    if launch is not None:
        specs.check_launch(launch, n, "fwd")
        if launch.path not in ("tile", "loop"):
            raise ValueError(f"launch {launch}: the quantized forward has tile and loop "
                             "launches only")
    else:
        launch = specs.forward_launch(x, residual, weight, quantized=SCALES[how])
    if group_size and launch.block_n % group_size:
        raise NotImplementedError(f"rmsnorm: the launch of width {n} ({launch}) has tiles of "
                                  f"{launch.block_n} columns, not a multiple of group_size "
                                  f"{group_size}: not supported")
    return launch


def _recipe(x, residual, weight, eps, offset, casting_mode, quant_dtype, scale, group_size,
            scale_ub, ue8m0, y_dtype, out, scales, residual_out, unquantized, normalized_sum,
            quantizer):
    """CPU without the interpreter: the forward's recipe (rmsnorm.launch.forward.forward_recipe),
    then the quantizer's."""
    y = unquantized if unquantized is not None else alloc(x.shape, y_dtype, x.device)
    forward_recipe(x, residual, weight, eps, offset, casting_mode, y, residual_out, None,
                   normalized_sum)
    qv, s = quant_contract.quantize(y, quant_dtype, scale=scale, group_size=group_size,
                                    scale_ub=scale_ub, use_ue8m0=ue8m0, quantizer=quantizer)
    out.copy_(qv)
    if scale is None:
        scales.copy_(s)
