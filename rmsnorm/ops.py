"""PyTorch front end: validation, allocation and the launch of the forward kernels."""

import contextlib
import functools

import torch
import triton.language as tl

from rmsnorm import configs, reference, validation as v
from rmsnorm.kernels.forward import fwd_loop_kernel, fwd_tile_kernel
from rmsnorm.layout import plan_rows

try:
    from triton.runtime.interpreter import InterpretedFunction
except ImportError:  # pragma: no cover - every supported triton has it
    InterpretedFunction = ()

# Triton decides at decoration time whether a kernel runs compiled or under its interpreter
# (TRITON_INTERPRET=1 set before triton is imported); ask the kernel itself.
INTERPRETED = isinstance(fwd_tile_kernel, InterpretedFunction)

# The interpreter runs programs one after another: two programs keep both the multi-program
# and the persistent-loop code exercised on small test shapes.
INTERPRETER_PROGRAMS = 2

_BACKWARD_MISSING = (
    "rmsnorm: backward is not implemented yet (it arrives with autograd support); {name} "
    "requires grad. Call under torch.no_grad() / torch.inference_mode(), or detach it.")


def rms_norm(x, weight=None, eps=1e-6, *, offset=0.0, casting_mode="llama", out=None):
    """RMSNorm over the last dimension: x * rsqrt(mean(x^2) + eps) * (weight + offset).

    casting_mode "llama" rounds x * rsqrt(...) to x.dtype before the weight and returns
    promote_types(x.dtype, weight.dtype) (HF LlamaRMSNorm); "gemma" rounds once and returns
    x.dtype (HF GemmaRMSNorm, torch.nn.functional.rms_norm). `out` may alias x.
    """
    y, _, _ = forward(x, weight, eps, offset=offset, casting_mode=casting_mode, out=out)
    return y


def fused_add_rms_norm(x, residual, weight=None, eps=1e-6, *, offset=0.0,
                       casting_mode="llama", inplace=False, out=None):
    """s = x + residual (rounded to residual.dtype); returns (rms_norm(s), s).

    With inplace=True the sum is written into `residual` itself, which is returned as the
    second element. `out` may alias x.
    """
    y, s, _ = forward(x, weight, eps, offset=offset, casting_mode=casting_mode,
                      residual=residual, inplace=inplace, out=out)
    return y, s


def forward(x, weight=None, eps=1e-6, *, offset=0.0, casting_mode="llama", residual=None,
            inplace=False, out=None, return_rstd=False, launch=None):
    """Shared forward: returns (y, residual_out or None, rstd or None).

    rstd (one fp32 value per row, fp64 for float64 input, shape x.shape[:-1]) is what the
    backward pass reuses. `launch` (a configs.Launch) replaces the table's choice; the
    tuning sweep uses it.
    """
    v.check_x(x)
    device = x.device
    n = x.shape[-1]
    v.check_weight(weight, n, device)
    fused = residual is not None
    if fused:
        v.check_same_shape("residual", residual, x, device)
    elif inplace:
        raise ValueError("inplace=True needs a residual tensor to update")
    v.check_scalars(eps, offset, casting_mode, weight)
    v.check_float64_not_mixed(x=x, residual=residual, weight=weight)
    for name, t in (("x", x), ("residual", residual), ("weight", weight)):
        if t is not None and t.requires_grad and torch.is_grad_enabled():
            raise NotImplementedError(_BACKWARD_MISSING.format(name=name))

    norm_dtype = residual.dtype if fused else x.dtype
    out_dtype = reference.output_dtype(norm_dtype, weight, casting_mode)
    if out is not None:
        v.check_same_shape("out", out, x, device)
        if out.dtype != out_dtype:
            raise TypeError(f"out has dtype {out.dtype}, expected {out_dtype} (casting_mode="
                            f"{casting_mode!r}, input {norm_dtype}, weight "
                            f"{None if weight is None else weight.dtype})")
        v.check_writable("out", out)
        v.check_no_partial_alias("out", out, "x", x)
        if fused:
            v.check_no_partial_alias("out", out, "residual", residual)
            if inplace and v.overlaps(out, residual):
                raise ValueError("out overlaps residual, which inplace=True also writes")
    if inplace:
        v.check_writable("residual", residual)

    y = out if out is not None else alloc(x.shape, out_dtype, device)
    if not fused:
        s = None
    elif inplace:
        s = residual
    else:
        s = alloc(x.shape, residual.dtype, device)
    rstd = alloc(x.shape[:-1], reference.acc_dtype(norm_dtype), device) if return_rstd else None

    if x.numel() == 0:
        return y, s, rstd
    if device.type == "cpu" and not INTERPRETED:
        _forward_recipe(x, residual, weight, eps, offset, casting_mode, y, s, rstd)
        return y, s, rstd
    _launch(x, residual, weight, eps, offset, casting_mode, y, s, rstd, launch)
    return y, s, rstd


def alloc(shape, dtype, device):
    """Every output the functions allocate comes from here (tests poison it with NaN)."""
    return torch.empty(shape, dtype=dtype, device=device)


def _forward_recipe(x, residual, weight, eps, offset, casting_mode, y, s, rstd):
    """CPU without the interpreter: DESIGN.md's contract in PyTorch ops."""
    if residual is None:
        y_ref, r = reference.contract_rms_norm(x, weight, eps, offset=offset,
                                               casting_mode=casting_mode)
    else:
        y_ref, s_ref, r = reference.contract_fused_add_rms_norm(
            x, residual, weight, eps, offset=offset, casting_mode=casting_mode)
        s.copy_(s_ref)
    y.copy_(y_ref)
    if rstd is not None:
        rstd.copy_(r.squeeze(-1))


def _readable(t):
    """Inputs are copied when their last dimension is strided (documented behaviour)."""
    return t if t.shape[-1] == 1 or t.stride(-1) == 1 else t.contiguous()


def _meta(t):
    return None if t is None else (t.stride(), t.dtype)


def _launch(x, residual, weight, eps, offset, casting_mode, y, s, rstd, launch):
    fused = residual is not None
    x = _readable(x)
    if fused and residual is not s:
        residual = _readable(residual)
    if weight is not None:
        weight = weight.contiguous()
    if launch is None:
        launch = configs.forward_launch(
            x.shape[-1], max(x.element_size(), residual.element_size() if fused else 0), fused,
            weight.element_size() if weight is not None else 0)

    def spec_of(x, residual):
        # Everything but the data pointers and scalars follows from the tensors' metadata:
        # worked out once per distinct call signature.
        return _launch_spec(x.shape, x.device, _meta(x), _meta(residual), _meta(y), _meta(s),
                            None if weight is None else weight.dtype, rstd is not None,
                            casting_mode, launch)

    spec = spec_of(x, residual)
    if spec is None:
        # More than two levels of row strides: copy what is only read, then retry.
        x = x.contiguous()
        if fused and residual is not s:
            residual = residual.contiguous()
        spec = spec_of(x, residual)
    if spec is None:
        culprit = "out" if plan_rows(y.shape[:-1], {"y": y.stride()[:-1]}) is None \
            else "residual (written in place)"
        raise ValueError(f"{culprit}: its leading dimensions cannot be addressed with two row "
                         "strides; pass a tensor whose leading dims merge into at most two")
    kernel, grid, sizes, flags = spec
    with _on_device(x.device):
        kernel[(grid,)](
            x, residual if fused else x, weight if weight is not None else x, y,
            s if fused else y, rstd if rstd is not None else y,
            *sizes, float(eps), float(offset), **flags)


@functools.lru_cache(maxsize=4096)
def _launch_spec(shape, device, x_meta, r_meta, y_meta, s_meta, w_dtype, has_rstd,
                 casting_mode, launch):
    """(kernel, grid, sizes and strides, constexprs) for one call signature, or None when the
    rows need more than two levels of strides."""
    fused = r_meta is not None
    named = {"x": x_meta, "y": y_meta, "residual": r_meta, "s": s_meta}
    strides = {k: m[0][:-1] for k, m in named.items() if m is not None}
    plan = plan_rows(shape[:-1], strides)
    if plan is None:
        return None
    n = shape[-1]
    x_dtype = x_meta[1]
    if INTERPRETED:
        grid = min(launch.grid(plan.rows, 1), INTERPRETER_PROGRAMS)
    else:
        grid = launch.grid(plan.rows, _sm_count(device))
    st = plan.strides
    zero = (0, 0)
    sizes = (plan.rows, n, plan.inner,
             *st["x"], *st.get("residual", zero), *st["y"], *st.get("s", zero))
    flags = dict(BLOCK_N=launch.block_n, ROWS=launch.rows, NUM_STAGES=launch.num_stages,
                 W_RESIDENT=launch.w_resident, HAS_RES=fused, HAS_W=w_dtype is not None,
                 HAS_RSTD=has_rstd, TWO_LEVEL=plan.two_level, LLAMA=casting_mode == "llama",
                 ACC=tl.float64 if x_dtype == torch.float64 else tl.float32,
                 SOFT_BF16=INTERPRETED, num_warps=launch.num_warps)
    kernel = fwd_tile_kernel if launch.path == "tile" else fwd_loop_kernel
    return kernel, grid, sizes, flags


def _on_device(device):
    # Triton launches on the current CUDA device; make it the tensors' one.
    if device.type == "cuda" and device.index != torch.cuda.current_device():
        return torch.cuda.device(device)
    return contextlib.nullcontext()


@functools.lru_cache(maxsize=None)
def _sm_count_of(index):
    return torch.cuda.get_device_properties(index).multi_processor_count


def _sm_count(device):
    return _sm_count_of(device.index if device.index is not None else
                        torch.cuda.current_device())
