"""The gradients the backward tests hold rmsnorm's against (float64 autograd's, the contract's
formulas', autograd's through the PyTorch recipes) and their tolerances."""

import torch

from rmsnorm import reference

# Norm-wise relative error of a gradient against float64 autograd: dx and dw are stored in
# 16-bit dtypes (one rounding, ~2^-9 for bf16 at worst, far less on average) from fp32 math.
GRAD_RTOL = {torch.bfloat16: 2 ** -8, torch.float16: 2 ** -11, torch.float32: 1e-5}
# Against autograd through the recipes, which round intermediates (g = dy * w, xhat) to the
# 16-bit dtype along the way: a few of the dtype's roundings.
RECIPE_RTOL = {torch.bfloat16: 2 ** -6, torch.float16: 2 ** -9, torch.float32: 1e-5}


def rel_err(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / b.norm()).item()


def grads(fn, inputs, dy):
    """Gradients of fn(*inputs) (a tensor or a tuple of tensors) for the output gradients dy."""
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    out = fn(*leaves)
    out = out if isinstance(out, tuple) else (out,)
    dy = dy if isinstance(dy, tuple) else (dy,)
    return torch.autograd.grad(out, leaves, dy)


def recipe_for(casting_mode, offset):
    if casting_mode == "llama":
        return lambda x, w: reference.hf_llama_rms_norm(x, w, 1e-6)
    if offset == 1.0:
        return lambda x, w: reference.hf_gemma_rms_norm(x, w, 1e-6)
    return lambda x, w: reference.torch_rms_norm(x, w, 1e-6)


def expected_gradients(x, w, dy, rstd, casting_mode, offset):
    """What dx and dw are held against: float64 autograd's, the contract's formulas' (from the
    forward's rstd) and autograd's through the PyTorch recipe the mode claims to match."""
    exact = grads(lambda a, b: reference.float64_rms_norm(a, b, 1e-6, offset),
                  (x.double(), w.double()), dy.double())
    contract = reference.contract_rms_norm_backward(dy, x, w, rstd, offset=offset,
                                                    casting_mode=casting_mode)
    recipe = grads(recipe_for(casting_mode, offset), (x, w), dy)
    return exact, contract, recipe


def assert_gradients_match(dx, dw, expected, dtype):
    """dx and dw within the dtype's tolerance of float64, half of it from the contract (which
    takes the same roundings) and within a few roundings of the recipe."""
    (dx64, dw64), (dx_c, dw_c), (dx_r, dw_r) = expected
    assert rel_err(dx, dx64) <= GRAD_RTOL[dtype] and rel_err(dw, dw64) <= GRAD_RTOL[dtype]
    assert rel_err(dx, dx_c) <= GRAD_RTOL[dtype] / 2 and rel_err(dw, dw_c) <= GRAD_RTOL[dtype] / 2
    assert rel_err(dx, dx_r) <= RECIPE_RTOL[dtype] and rel_err(dw, dw_r) <= RECIPE_RTOL[dtype]
