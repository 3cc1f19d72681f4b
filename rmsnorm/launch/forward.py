"""The forward's launcher: validation, allocation and the launch of the forward kernels (the
fused add's too). Which kernel serves a call is rmsnorm.launch.specs' decision."""

from rmsnorm.launch import contract, specs, validation as v
from rmsnorm.launch.device import INTERPRETED, on_device
from rmsnorm.launch.tensors import aligned, alloc, meta, readable, resolved, staged


def forward(x, weight=None, eps=1e-6, *, offset=0.0, casting_mode="llama", residual=None,
            inplace=False, out=None, residual_out=None, return_rstd=False, launch=None,
            normalized_sum="rounded"):
    """Shared forward: returns (y, residual_out or None, rstd or None).

    The sum of the fused add goes to `residual_out` when given, to `residual` itself with
    inplace=True, else to a new tensor; normalized_sum "fp32" normalizes it unrounded. rstd
    (one fp32 value per row, fp64 for float64 input, shape x.shape[:-1]) is what the
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
    elif residual_out is not None:
        raise ValueError("residual_out is the fused add's sum; it needs a residual tensor")
    if residual_out is not None:
        if inplace and residual_out is not residual:
            raise ValueError("inplace=True writes the sum into residual; residual_out must be "
                             "residual or None")
        inplace = residual_out is residual
    v.check_scalars(eps, offset, casting_mode, weight)
    v.check_normalized_sum(normalized_sum, fused)
    v.check_float64_not_mixed(x=x, residual=residual, weight=weight)

    norm_dtype = residual.dtype if fused else x.dtype
    out_dtype = contract.output_dtype(norm_dtype, weight, casting_mode)
    if out is not None:
        v.check_same_shape("out", out, x, device)
        if out.dtype != out_dtype:
            raise TypeError(f"out has dtype {out.dtype}, expected {out_dtype} (casting_mode="
                            f"{casting_mode!r}, input {norm_dtype}, weight "
                            f"{None if weight is None else weight.dtype})")
    if residual_out is not None and not inplace:
        v.check_same_shape("residual_out", residual_out, x, device)
        if residual_out.dtype != residual.dtype:
            raise TypeError(f"residual_out has dtype {residual_out.dtype}, expected "
                            f"{residual.dtype} (the residual's)")
    _check_outputs(x, residual, weight, out, residual if inplace else residual_out, inplace)
    x, weight = resolved(x), resolved(weight)
    if not inplace:
        residual = resolved(residual)

    y = out if out is not None else alloc(x.shape, out_dtype, device)
    if inplace:
        residual_out = residual
    elif fused and residual_out is None:
        residual_out = alloc(x.shape, residual.dtype, device)
    rstd = alloc(x.shape[:-1], contract.acc_dtype(norm_dtype), device) if return_rstd else None

    if x.numel() == 0:
        return y, residual_out, rstd
    if device.type == "cpu" and not INTERPRETED:
        forward_recipe(x, residual, weight, eps, offset, casting_mode, y, residual_out, rstd,
                       normalized_sum)
        return y, residual_out, rstd
    launch_forward(x, residual, weight, eps, offset, casting_mode, y, residual_out, rstd,
                   launch, fp32_sum=normalized_sum == "fp32")
    return y, residual_out, rstd


def _check_outputs(x, residual, weight, out, residual_out, inplace):
    """What the forward writes (y into `out`, the sum into `residual_out`) against what it
    reads: each output may be an input exactly (read before it is written, by the same
    thread) or share no element with it; the two outputs share nothing; the weight, read by
    every row, shares nothing with an output."""
    residual_out_name = "residual (updated in place)" if inplace else "residual_out"
    if out is not None:
        v.check_writable("out", out)
        v.check_no_partial_alias("out", out, "x", x)
        if inplace:
            v.check_disjoint("out", out, "residual", residual, ", which inplace=True also "
                                                               "writes")
        else:
            v.check_no_partial_alias("out", out, "residual", residual)
            v.check_disjoint("out", out, "residual_out", residual_out,
                             "; they are two different results")
        v.check_disjoint("out", out, "weight", weight, ", which every row reads")
    if residual_out is not None:
        v.check_writable(residual_out_name, residual_out)
        v.check_no_partial_alias(residual_out_name, residual_out, "x", x)
        if not inplace:
            v.check_no_partial_alias(residual_out_name, residual_out, "residual", residual)
        v.check_disjoint(residual_out_name, residual_out, "weight", weight,
                         ", which every row reads")


def forward_recipe(x, residual, weight, eps, offset, casting_mode, y, residual_out, rstd,
                   normalized_sum="rounded"):
    """CPU without the interpreter: DESIGN.md's contract in PyTorch ops, into the outputs."""
    if residual is None:
        y_ref, r = contract.contract_rms_norm(x, weight, eps, offset=offset,
                                               casting_mode=casting_mode)
    else:
        y_ref, residual_out_ref, r = contract.contract_fused_add_rms_norm(
            x, residual, weight, eps, offset=offset, casting_mode=casting_mode,
            normalized_sum=normalized_sum)
        residual_out.copy_(residual_out_ref)
    y.copy_(y_ref)
    if rstd is not None:
        rstd.copy_(r.squeeze(-1))


def launch_forward(x, residual, weight, eps, offset, casting_mode, y, residual_out, rstd,
                   launch, quant=None, fp32_sum=False):
    """The launch of validated arguments into allocated outputs (the quantized forward's
    too). quant: the quantized epilogue's arguments (rmsnorm.launch.quant.Epilogue), whose
    outputs (y among them) are the launcher's own contiguous allocations. fp32_sum: the fused
    add normalizes its unrounded sum (normalized_sum="fp32")."""
    fused = residual is not None
    inplace = fused and residual is residual_out
    x = readable(x)
    if fused and not inplace:
        residual = readable(residual)
    if weight is not None:
        weight = weight.contiguous()
    if launch is None:
        launch = specs.forward_launch(x, residual, weight)
    else:
        specs.check_launch(launch, x.shape[-1], "fwd")
    if fp32_sum:
        launch = specs.fp32_sum_launch(launch, x, residual, weight)
    spec = specs.forward_spec(x.shape, x.device, meta(x), meta(residual), meta(y),
                              meta(residual_out), None if weight is None else weight.dtype,
                              rstd is not None, casting_mode, launch, quant and quant.quantized,
                              quant and quant.unquantized.dtype, fp32_sum)
    if spec is None or not spec[2] or not aligned(x, residual, weight, y, residual_out):
        # Not the kernel the same data laid out contiguously would run (more than two
        # levels of row strides, a pointer off 16 bytes, a row stride that Triton
        # specializes otherwise than n, or one of 2^31 elements or more): run that kernel
        # on contiguous copies, so that every layout gives the contiguous layout's bits.
        y_c = y if quant else alloc(y.shape, y.dtype, y.device)
        if inplace:
            # The residual, read and then overwritten with the sum.
            residual_out_c = staged(residual_out)
        else:
            residual_out_c = None if residual_out is None else \
                alloc(residual_out.shape, residual_out.dtype, residual_out.device)
        launch_forward(staged(x), residual_out_c if inplace else staged(residual),
                       staged(weight), eps, offset, casting_mode, y_c, residual_out_c, rstd,
                       launch, quant, fp32_sum)
        if y_c is not y:
            y.copy_(y_c)
        if fused:
            residual_out.copy_(residual_out_c)
        return
    prepared, sizes, _ = spec
    if quant:
        with on_device(x.device):
            prepared(x, residual if fused else x, weight if weight is not None else x, y,
                     residual_out if fused else y, rstd if rstd is not None else y,
                     *quant.pointers(y), *sizes, *quant.scalars(sizes[0]), float(eps),
                     float(offset))
        return
    # The split forward normalizes the rounded sum it wrote: the unrounded one takes the loop.
    if not fp32_sum and (launch.path == "split" or (
            launch.path == "loop" and sizes[0] < specs.split_below(x.device, fused))):
        _split_forward(x, residual, weight, y, residual_out, rstd, sizes, eps, offset,
                       casting_mode, launch, prepared.constexprs["TWO_LEVEL"])
        return
    with on_device(x.device):
        prepared(x, residual if fused else x, weight if weight is not None else x, y,
                 residual_out if fused else y, rstd if rstd is not None else y,
                 *sizes, float(eps), float(offset))


def _split_forward(x, residual, weight, y, residual_out, rstd, sizes, eps, offset,
                   casting_mode, launch, two_level):
    """The forward of rmsnorm.kernels.forward_split over the rows `sizes` describes (the
    looped kernel's sizes and strides, from specs.forward_spec)."""
    fused = residual is not None
    rows, n, inner, rstd_rows = sizes[:4]
    st_x, st_r, st_y, st_residual_out = sizes[4:6], sizes[6:8], sizes[8:10], sizes[10:12]
    tiles = -(-n // launch.block_n)
    dtypes = (x.dtype, residual.dtype if fused else None,
              weight.dtype if weight is not None else None, y.dtype,
              residual_out.dtype if fused else None)
    sumsq, scale = specs.split_forward_spec(x.device, rows * tiles, fused, weight is not None,
                                            two_level, casting_mode, dtypes, launch,
                                            (n, *sizes[4:]))
    sums = alloc((rows, tiles), contract.acc_dtype(x.dtype), x.device)
    src, st_src = (residual_out, st_residual_out) if fused else (x, st_x)
    with on_device(x.device):
        sumsq(x, residual if fused else x, residual_out if fused else x, sums, rows, n, inner,
              tiles, *st_x, *st_r, *st_residual_out)
        scale(src, weight if weight is not None else x, y, rstd if rstd is not None else y,
              sums, rows, n, inner, tiles, rstd_rows, *st_src, *st_y, float(eps), float(offset))
