"""CPU tensors without Triton's interpreter run DESIGN.md's contract, forward and backward, in
PyTorch ops."""

import os
import subprocess
import sys
import textwrap

from helpers import ROOT

SCRIPT = textwrap.dedent("""
    import torch, rmsnorm
    from rmsnorm import reference
    from rmsnorm.launch import ops
    assert not ops.INTERPRETED
    g = torch.Generator().manual_seed(0)
    x = torch.randn(33, 300, generator=g).bfloat16()
    r = torch.randn(33, 300, generator=g).bfloat16()
    w = (torch.randn(300, generator=g) + 1).bfloat16()
    for mode in ("llama", "gemma"):
        y = rmsnorm.rms_norm(x, w, offset=0.5, casting_mode=mode)
        assert torch.equal(y, reference.contract_rms_norm(x, w, offset=0.5,
                                                          casting_mode=mode)[0])
    y, s = rmsnorm.fused_add_rms_norm(x, r, w, inplace=True)
    assert s is r
    assert torch.equal(y, reference.hf_llama_rms_norm(s, w))
    # Training too: the contract's backward formulas, against float64 autograd.
    xd = torch.randn(5, 64, generator=g, dtype=torch.float64, requires_grad=True)
    wd = torch.randn(64, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: rmsnorm.rms_norm(a, b, offset=0.5), (xd, wd))
    xg, wg = x.float().requires_grad_(), w.float().requires_grad_()
    dy = torch.randn(33, 300, generator=g)
    got = torch.autograd.grad(rmsnorm.rms_norm(xg, wg, casting_mode="gemma"), (xg, wg), dy)
    want = torch.autograd.grad(reference.torch_rms_norm(xg, wg), (xg, wg), dy)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    # The quantized forward: the forward's recipe, then the quantizer's, unquantized or not.
    for kw in ({}, dict(group_size=64, ue8m0=True), dict(scale=torch.tensor([0.02]))):
        x64 = x[:, :256].contiguous()
        q = rmsnorm.rms_norm_quant(x64, w[:256], return_unquantized=True, **kw)
        y = rmsnorm.rms_norm(x64, w[:256])
        want, scales = reference.quantize(y, torch.float8_e4m3fn, scale=kw.get("scale"),
                                          group_size=kw.get("group_size"),
                                          use_ue8m0=kw.get("ue8m0", False))
        assert torch.equal(q.out.view(torch.uint8), want.view(torch.uint8))
        assert torch.equal(q.scales, scales) and torch.equal(q.unquantized, y)
        residual = r[:, :256].clone()
        q = rmsnorm.fused_add_rms_norm_quant(x64, residual, w[:256], inplace=True, **kw)
        y, s = rmsnorm.fused_add_rms_norm(x64, r[:, :256].clone(), w[:256])
        assert q.residual_out is residual and torch.equal(residual, s)
        want, _ = reference.quantize(y, torch.float8_e4m3fn, scale=kw.get("scale"),
                                     group_size=kw.get("group_size"),
                                     use_ue8m0=kw.get("ue8m0", False))
        assert torch.equal(q.out.view(torch.uint8), want.view(torch.uint8))
    print("ok")
""")


def test_cpu_tensors_use_the_pytorch_recipe_without_the_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
