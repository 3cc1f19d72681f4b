"""Tensors over 2^31 elements: 64-bit offsets everywhere (GPU only, up to 12 GiB)."""

import pytest
import torch

import rmsnorm
from rmsnorm import reference
from helpers import assert_matches_recipe, recipe_rms_norm

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU"),
              pytest.mark.big_gpu_memory]


@pytest.mark.parametrize("fused", [False, True])
def test_rows_past_two_to_the_31_elements(fused):
    m, n = 2 ** 20, 2 ** 11 + 1  # 2^31 + 2^20 elements, about 4 GiB in bf16
    g = torch.Generator(device="cuda").manual_seed(31)
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, generator=g)
    w = (torch.randn(n, device="cuda", generator=g) * 0.5 + 1).to(torch.bfloat16)
    if fused:
        residual = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, generator=g)
        rows = torch.tensor([0, 1, m // 2, m - 2, m - 1], device="cuda")
        x_rows, r_rows = x[rows].clone(), residual[rows].clone()
        y, s = rmsnorm.fused_add_rms_norm(x, residual, w, inplace=True)
        s_ref = reference.residual_add(x_rows, r_rows)
        assert torch.equal(s[rows], s_ref)
        assert_matches_recipe(y[rows], *recipe_rms_norm(s_ref, w, 1e-6, 0.0, "llama"))
    else:
        y = torch.full_like(x, float("nan"))
        rmsnorm.rms_norm(x, w, out=y)
        rows = torch.cat([torch.arange(0, 4, device="cuda"),
                          torch.randint(0, m, (60,), device="cuda", generator=g),
                          torch.arange(m - 4, m, device="cuda")])
        assert_matches_recipe(y[rows], *recipe_rms_norm(x[rows], w, 1e-6, 0.0, "llama"))
        assert not torch.isnan(y[-1]).any()


def test_backward_past_two_to_the_31_elements():
    from rmsnorm.launch import ops
    m, n = 2 ** 20, 2 ** 11 + 1
    g = torch.Generator(device="cuda").manual_seed(32)
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, generator=g)
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, generator=g)
    w = (torch.randn(n, device="cuda", generator=g) * 0.5 + 1).to(torch.bfloat16)
    _, _, rstd = ops.forward(x, w, return_rstd=True)
    dx, _ = ops.backward(dy, x, w, rstd, need_dw=False)
    rows = torch.tensor([0, 1, m // 2, m - 2, m - 1], device="cuda")
    dx_ref, _ = reference.contract_rms_norm_backward(dy[rows], x[rows], w, rstd[rows])
    # Same formula in fp32 from the same rstd; sums in another order: at most one bf16 step.
    diff = (dx[rows].float() - dx_ref.float()).abs()
    assert (diff <= dx_ref.float().abs() * 2 ** -7 + 1e-6).all()
