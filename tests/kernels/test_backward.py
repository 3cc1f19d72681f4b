"""Backward: dx, dw and the fused add's ds, against gradcheck, float64 autograd, the contract's
formulas and autograd through the PyTorch recipes; deterministic; dy left alone."""

import pytest
import torch

import rmsnorm
from rmsnorm import reference
from rmsnorm.launch import configs, ops
import helpers
from gradients import GRAD_RTOL, assert_gradients_match, expected_gradients, grads, rel_err
from helpers import randn, seed_of, weight_for

F64 = torch.float64


def backward_inputs(tag, shape, dtype, device, fused=False):
    """Fresh x, weight, dy (and the fused add's d(residual_out)) and the forward's rstd."""
    seed = seed_of("bwd-inputs", tag, shape, dtype, fused)
    x, dy = randn(shape, dtype, device, seed), randn(shape, dtype, device, seed + 2)
    w = weight_for(shape[-1], dtype, device, seed)
    dresidual = randn(shape, dtype, device, seed + 3) if fused else None
    _, _, rstd = ops.forward(x, w, return_rstd=True)
    return x, w, dy, dresidual, rstd


def gradcheck(fn, inputs, device):
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    # Full Jacobians on the GPU; random projections of them under the slow interpreter.
    assert torch.autograd.gradcheck(fn, leaves, fast_mode=device == "cpu")


CASES = [  # (casting_mode, offset, with_weight)
    ("llama", 0.0, True), ("gemma", 0.0, True), ("gemma", 1.0, True), ("llama", 0.5, True),
    ("llama", 0.0, False),
]


@pytest.mark.parametrize("casting_mode,offset,with_weight", CASES)
@pytest.mark.parametrize("fused", [False, True])
def test_gradcheck_float64(device, casting_mode, offset, with_weight, fused):
    seed = seed_of("gradcheck", casting_mode, offset, with_weight, fused)
    x = randn((3, 8), F64, device, seed)
    res = randn((3, 8), F64, device, seed + 1)
    w = weight_for(8, F64, device, seed)
    kw = dict(eps=1e-6, offset=offset, casting_mode=casting_mode)
    if fused:
        if with_weight:
            gradcheck(lambda a, b, c: rmsnorm.fused_add_rms_norm(a, b, c, **kw), (x, res, w),
                      device)
        else:
            gradcheck(lambda a, b: rmsnorm.fused_add_rms_norm(a, b, **kw), (x, res), device)
    elif with_weight:
        gradcheck(lambda a, c: rmsnorm.rms_norm(a, c, **kw), (x, w), device)
    else:
        gradcheck(lambda a: rmsnorm.rms_norm(a, **kw), (x,), device)


def test_gradcheck_strided_two_level_rows(device):
    seed = seed_of("gradcheck-strided")
    base = randn((2, 4, 8), F64, device, seed)
    w = weight_for(8, F64, device, seed)

    def fn(b, c):
        return rmsnorm.rms_norm(b[:, 1:, :], c)  # [2, 3, 8] with two row strides

    gradcheck(fn, (base, w), device)


@pytest.mark.parametrize("fused", [False, True])
def test_gradcheck_looped_path(device, fused):
    seed = seed_of("gradcheck-loop", fused)
    x, res = randn((3, 20), F64, device, seed), randn((3, 20), F64, device, seed + 1)
    w = weight_for(20, F64, device, seed)
    with helpers.max_tile(8):
        assert configs.backward_launch(20, 8, fused).path == "loop"
        if fused:
            gradcheck(lambda a, b, c: rmsnorm.fused_add_rms_norm(a, b, c), (x, res, w), device)
        else:
            gradcheck(lambda a, c: rmsnorm.rms_norm(a, c), (x, w), device)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("casting_mode,offset", [("llama", 0.0), ("gemma", 0.0),
                                                 ("gemma", 1.0)])
@pytest.mark.parametrize("n", [7, 256, 1000])
def test_gradients_against_float64_the_contract_and_the_recipe(device, dtype, casting_mode,
                                                               offset, n):
    seed = seed_of("grads", dtype, casting_mode, offset, n)
    x = randn((33, n), dtype, device, seed)
    w = weight_for(n, dtype, device, seed) - offset
    dy = randn((33, n), dtype, device, seed + 2)
    dx, dw = grads(lambda a, b: rmsnorm.rms_norm(a, b, offset=offset,
                                                 casting_mode=casting_mode), (x, w), dy)
    assert dx.dtype == dtype and dw.dtype == dtype
    _, rstd = reference.contract_rms_norm(x, w, offset=offset, casting_mode=casting_mode)
    assert_gradients_match(dx, dw, expected_gradients(x, w, dy, rstd.squeeze(-1), casting_mode,
                                                      offset), dtype)


def test_llama_dw_sees_the_rounded_normalized_input(device):
    # bf16 x with an fp32 weight: dw is fp32, fine enough to tell xhat rounded to bf16 (the
    # contract, as HF's graph sees it) from the unrounded xhat.
    seed = seed_of("llama-dw")
    x = randn((40, 256), torch.bfloat16, device, seed)
    w = weight_for(256, torch.float32, device, seed)
    dy = randn((40, 256), torch.float32, device, seed + 2)
    _, dw = grads(lambda a, b: rmsnorm.rms_norm(a, b), (x, w), dy)
    _, rstd = reference.contract_rms_norm(x, w)
    _, dw_c = reference.contract_rms_norm_backward(dy, x, w, rstd.squeeze(-1))
    _, dw_unrounded = reference.contract_rms_norm_backward(dy, x, w, rstd.squeeze(-1),
                                                           casting_mode="gemma")
    assert rel_err(dw_c, dw_unrounded) > 1e-4  # the test can tell them apart
    assert rel_err(dw, dw_c) <= 1e-6


@pytest.mark.parametrize("m", [65, 1000, 4096])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_dw_over_many_rows_against_float64(device, m, dtype):
    seed = seed_of("dw-rows", m, dtype)
    x = randn((m, 64), dtype, device, seed, scale=2.0)
    w = weight_for(64, dtype, device, seed)
    dy = randn((m, 64), dtype, device, seed + 2)
    _, dw = grads(lambda a, b: rmsnorm.rms_norm(a, b, casting_mode="gemma"), (x, w), dy)
    _, dw64 = grads(lambda a, b: reference.float64_rms_norm(a, b), (x.double(), w.double()),
                    dy.double())
    # A sum over m rows accumulated in fp32, rounded once to the weight's dtype.
    err = (dw.double().cpu() - dw64.cpu()).abs()
    bound = GRAD_RTOL[dtype] * dw64.abs().cpu() + 1e-6 * dw64.abs().max().cpu()
    assert (err <= bound).all(), f"worst {(err / bound).max().item():.3g}x the bound"


@pytest.mark.parametrize("x_dtype,r_dtype", [(torch.bfloat16, torch.bfloat16),
                                             (torch.bfloat16, torch.float32),
                                             (torch.float32, torch.float32)])
def test_fused_add_gives_x_and_residual_the_gradient_of_the_sum(device, x_dtype, r_dtype):
    seed = seed_of("fused-grads", x_dtype, r_dtype)
    x, res = randn((17, 300), x_dtype, device, seed), randn((17, 300), r_dtype, device, seed + 1)
    w = weight_for(300, x_dtype, device, seed)
    dy = randn((17, 300), reference.output_dtype(r_dtype, w, "llama"), device, seed + 2)
    ds_out = randn((17, 300), r_dtype, device, seed + 3)
    dx, residual_grad, dw = grads(lambda a, b, c: rmsnorm.fused_add_rms_norm(a, b, c),
                                  (x, res, w), (dy, ds_out))
    assert dx.dtype == x_dtype and residual_grad.dtype == r_dtype and dw.dtype == w.dtype
    assert torch.equal(dx, residual_grad.to(x_dtype))

    # The norm sees the rounded sum (DESIGN.md); in float64 its gradient is the ground truth.
    s = reference.residual_add(x, res).double()
    ds64, dw64 = grads(lambda a, c: (reference.float64_rms_norm(a, c), a * 1.0),
                       (s, w.double()), (dy.double(), ds_out.double()))
    assert rel_err(residual_grad, ds64) <= GRAD_RTOL[r_dtype]
    assert rel_err(dw, dw64) <= GRAD_RTOL[x_dtype]


@pytest.mark.parametrize("used", ["y", "residual_out"])
def test_fused_add_with_one_output_used_takes_the_other_gradient_as_zero(device, used):
    seed = seed_of("one-output", used)
    x, res = randn((9, 200), torch.bfloat16, device, seed), randn((9, 200), torch.float32,
                                                                   device, seed + 1)
    w = weight_for(200, torch.bfloat16, device, seed)
    leaves = [t.detach().clone().requires_grad_() for t in (x, res, w)]
    y, s = rmsnorm.fused_add_rms_norm(*leaves)
    used_out = y if used == "y" else s
    d_used = randn(used_out.shape, used_out.dtype, device, seed + 2)
    got = torch.autograd.grad(used_out, leaves, d_used, allow_unused=True)
    # The same step with the unused output's gradient given as zeros.
    zero = torch.zeros_like(s if used == "y" else y)
    both = (d_used, zero) if used == "y" else (zero, d_used)
    want = grads(lambda a, b, c: rmsnorm.fused_add_rms_norm(a, b, c), (x, res, w), both)
    for g, expected in zip(got, want):
        assert torch.equal(g, expected)
    if used == "residual_out":
        assert torch.equal(got[1], d_used) and torch.equal(got[0], d_used.to(x.dtype))
        assert torch.equal(got[2], torch.zeros_like(w))


def test_inplace_fused_add_under_autograd_matches_the_out_of_place_one(device):
    seed = seed_of("inplace-grad")
    x = randn((5, 64), torch.float32, device, seed)
    w = weight_for(64, torch.float32, device, seed)
    base = randn((5, 64), torch.float32, device, seed + 1)
    results = []
    for inplace in (True, False):
        leaves = [t.clone().requires_grad_() for t in (x, base, w)]
        residual = leaves[1] * 1.0  # a non-leaf residual stream, as in a model
        y, s = rmsnorm.fused_add_rms_norm(leaves[0], residual, leaves[2], inplace=inplace)
        assert (s is residual) == inplace
        (y.square().sum() + s.sum()).backward()
        results.append([y.detach(), s.detach()] + [t.grad for t in leaves])
    for got, want in zip(*results):
        assert torch.equal(got, want)


@pytest.mark.parametrize("n,max_tile", [(1000, None), (20, 8)])
@pytest.mark.parametrize("fused", [False, True])
def test_backward_is_bit_identical_from_run_to_run(device, n, max_tile, fused):
    m = 3000 if device == "cuda" else 24  # on the GPU: many programs, many partial rows
    x, w, dy, dresidual, rstd = backward_inputs("determinism", (m, n), torch.bfloat16, device,
                                                fused)
    with helpers.max_tile(max_tile or 1 << 20):
        first = ops.backward(dy, x, w, rstd, dresidual=dresidual)
        second = ops.backward(dy, x, w, rstd, dresidual=dresidual)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])


def test_dy_is_left_alone_unless_dx_is_written_into_it(device):
    x, w, dy, _, rstd = backward_inputs("dy-kept", (9, 256), torch.bfloat16, device)
    dy_before = dy.clone()
    dx, dw = ops.backward(dy, x, w, rstd)
    assert torch.equal(dy, dy_before)
    # Gemma2-style graphs reuse dy; writing dx over it is an explicit opt-in.
    dx2, dw2 = ops.backward(dy, x, w, rstd, dx_out=dy)
    assert dx2 is dy and torch.equal(dx2, dx) and torch.equal(dw2, dw)


@pytest.mark.parametrize("fused", [False, True])
def test_frozen_weight_skips_dw_and_keeps_dx(device, fused):
    seed = seed_of("frozen", fused)
    x, res = randn((7, 96), torch.float32, device, seed), randn((7, 96), torch.float32,
                                                                 device, seed + 1)
    w = weight_for(96, torch.float32, device, seed)
    dy = randn((7, 96), torch.float32, device, seed + 2)
    xg = x.clone().requires_grad_()
    y = rmsnorm.fused_add_rms_norm(xg, res, w)[0] if fused else rmsnorm.rms_norm(xg, w)
    (dx,) = torch.autograd.grad(y, xg, dy)
    dx_all, _ = grads((lambda a, c: rmsnorm.fused_add_rms_norm(a, res, c)[0]) if fused else
                      (lambda a, c: rmsnorm.rms_norm(a, c)), (x, w), dy)
    assert torch.equal(dx, dx_all)


def test_no_rows_gives_empty_dx_and_zero_dw(device):
    x = torch.empty((0, 16), device=device, requires_grad=True)
    w = torch.ones(16, device=device, requires_grad=True)
    rmsnorm.rms_norm(x, w).sum().backward()
    assert x.grad.shape == (0, 16) and torch.equal(w.grad, torch.zeros_like(w))


def test_module_parameters_get_gradients(device):
    norm = rmsnorm.GemmaRMSNorm(64).to(device)
    x = randn((4, 64), torch.float32, device, seed_of("module-grad")).requires_grad_()
    norm(x).square().sum().backward()
    assert norm.weight.grad is not None and x.grad is not None
    assert torch.isfinite(norm.weight.grad).all() and norm.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("fused", [False, True])
def test_dw_partials_kept_in_global_memory_equal_the_register_ones(device, fused):
    # Wide rows keep the dw partial row in L2 instead of registers (configs: dw_resident).
    x, w, dy, dresidual, rstd = backward_inputs("dw-global", (37, 50), torch.float32, device, fused)
    launches = [configs.Launch("tile", 64, 4, 2, 1, 1, True, dw_resident=resident)
                for resident in (True, False)]
    (dx_r, dw_r), (dx_g, dw_g) = [ops.backward(dy, x, w, rstd, dresidual=dresidual, launch=launch)
                                  for launch in launches]
    assert torch.equal(dx_r, dx_g)
    torch.testing.assert_close(dw_g, dw_r, rtol=1e-6, atol=1e-6)  # summed in another order
    _, dw_c = reference.contract_rms_norm_backward(dy, x, w, rstd)
    torch.testing.assert_close(dw_g, dw_c, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fused", [False, True])
def test_looped_path_with_several_rows_per_step(device, fused):
    # 7 rows, 2 per step: the last step is half masked; 50 columns in tiles of 16.
    x, w, dy, dresidual, rstd = backward_inputs("loop-rows", (7, 50), torch.float32, device, fused)
    dx, dw = ops.backward(dy, x, w, rstd, dresidual=dresidual,
                          launch=configs.Launch("loop", 16, 2, 1, 1, 1, False))
    dx_c, dw_c = reference.contract_rms_norm_backward(dy, x, w, rstd, dresidual=dresidual)
    torch.testing.assert_close(dx, dx_c, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(dw, dw_c, rtol=1e-5, atol=1e-5)
