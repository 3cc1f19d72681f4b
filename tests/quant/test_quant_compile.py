"""The quantized forward under torch.compile (fullgraph, no breaks, the eager bits), the
dispatcher's checks (opcheck) and CUDA graphs (a static scale changed between replays)."""

import pytest
import torch

import rmsnorm
from helpers import randn, seed_of, weight_for


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def block(x, residual, w, scale):
    """A serving block's two norms: the fused add feeding a static-fp8 GEMM input, the
    plain norm feeding a per-group (transposed, UE8M0) one."""
    a = rmsnorm.fused_add_rms_norm_quant(x, residual, w, scale=scale)
    b = rmsnorm.rms_norm_quant(a.residual_out, w, group_size=64, ue8m0=True,
                               transposed_scales=True, return_unquantized=True)
    return a.out, a.residual_out, b.out, b.scales, b.unquantized


def test_compiled_block_matches_eager_without_graph_breaks(device):
    from torch._dynamo.utils import counters

    seed = seed_of("quant-compile")
    x = randn((2, 3, 128), torch.bfloat16, device, seed)
    residual = randn((2, 3, 128), torch.bfloat16, device, seed + 1)
    w = weight_for(128, torch.bfloat16, device, seed)
    scale = torch.tensor([0.02], device=device)
    eager = block(x, residual, w, scale)
    compiled = torch.compile(block, fullgraph=True)(x, residual, w, scale)
    for e, c in zip(eager, compiled):
        assert e.dtype == c.dtype and e.shape == c.shape and e.stride() == c.stride()
        assert torch.equal(e.view(torch.uint8) if e.element_size() == 1 else e,
                           c.view(torch.uint8) if c.element_size() == 1 else c)
    assert sum(counters["graph_break"].values()) == 0


def _opcheck_cases(d):
    x = randn((3, 128), torch.bfloat16, d, 1)
    r = randn((3, 128), torch.bfloat16, d, 2)
    w = weight_for(128, torch.bfloat16, d, 1)
    scale, ub = torch.tensor([0.05], device=d), torch.tensor([2.0], device=d)
    return {
        # ... casting_mode, normalized_sum, quantizer, quant_dtype, group_size, ue8m0,
        # transposed_scales, return_unquantized
        "static": ("quant_fwd", (x, None, w, scale, None, 1e-6, 0.0, "llama", "rounded",
                                 "vllm", torch.float8_e4m3fn, 0, False, False, False)),
        "token-add": ("quant_fwd", (x, r, w, None, ub, 1e-6, 0.0, "gemma", "fp32",
                                    "vllm_fused", torch.float8_e5m2, 0, False, False, True)),
        "group-transposed": ("quant_fwd", (x, None, w, None, None, 1e-6, 0.0, "llama",
                                           "rounded", "vllm_fused", torch.int8, 64, False,
                                           True, True)),
        "inplace": ("quant_add_fwd_inplace", (x, r.clone(), w, None, None, 1e-6, 0.0, "llama",
                                              "fp32", "vllm", torch.float8_e4m3fn, 128, True,
                                              False, False)),
    }


@pytest.mark.parametrize("case", ["static", "token-add", "group-transposed", "inplace"])
def test_the_quant_ops_pass_torch_library_opcheck(device, case):
    op, args = _opcheck_cases(device)[case]
    torch.library.opcheck(getattr(torch.ops.rmsnorm, op).default, args,
                          test_utils=("test_schema", "test_faketensor",
                                      "test_autograd_registration"))


def test_refused_under_autograd_and_fine_under_no_grad(device):
    x = randn((2, 64), torch.float32, device, seed_of("quant-grad"))
    w = weight_for(64, torch.float32, device, 3).requires_grad_()
    with pytest.raises(RuntimeError, match="not differentiable.*torch.no_grad"):
        rmsnorm.rms_norm_quant(x, w)
    with torch.no_grad():
        assert rmsnorm.rms_norm_quant(x, w).out.dtype == torch.float8_e4m3fn
    with torch.inference_mode():
        assert rmsnorm.fused_add_rms_norm_quant(x, x.clone(), w, inplace=True).out.shape == x.shape


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("mode", ["static", "token", "group"])
def test_cuda_graph_replays_with_a_new_scale_and_new_inputs(mode):
    seed = seed_of("quant-graph", mode)
    x = randn((64, 4096), torch.bfloat16, "cuda", seed)
    residual = randn((64, 4096), torch.bfloat16, "cuda", seed + 1)
    w = weight_for(4096, torch.bfloat16, "cuda", seed)
    scale = torch.tensor([0.01], device="cuda")
    kw = dict(scale=scale) if mode == "static" else \
        dict(group_size=128) if mode == "group" else dict(scale_ub=torch.tensor([3.0],
                                                                                device="cuda"))
    static_x, static_r = x.clone(), residual.clone()
    rmsnorm.fused_add_rms_norm_quant(static_x, static_r.clone(), w, **kw)  # compile first
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = rmsnorm.fused_add_rms_norm_quant(static_x, static_r, w, inplace=True, **kw)
    new_x = randn((64, 4096), torch.bfloat16, "cuda", seed + 2)
    static_x.copy_(new_x)
    static_r.copy_(residual)
    scale.fill_(0.02)
    graph.replay()
    expected = rmsnorm.fused_add_rms_norm_quant(new_x, residual.clone(), w, **kw)
    assert torch.equal(got.out.view(torch.uint8), expected.out.view(torch.uint8))
    assert torch.equal(got.scales, expected.scales)
    assert torch.equal(static_r, expected.residual_out)
