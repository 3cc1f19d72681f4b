"""torch.compile(fullgraph=True) and CUDA graphs: the custom ops trace with no graph breaks,
and eager, compiled and graph-replayed runs give identical forward and backward results."""

import pytest
import torch

import rmsnorm
from helpers import NormBlock, randn, seed_of, weight_for

N = 32


def block_and_inputs(tag, m, device):
    """A Block and fresh fp32 x and residual of m rows for it."""
    seed = seed_of(tag)
    return NormBlock(N, device), randn((m, N), torch.float32, device, seed), \
        randn((m, N), torch.float32, device, seed + 1)


def run(fn, model, x, residual):
    """Outputs and all gradients of one forward + backward."""
    model.zero_grad(set_to_none=True)
    leaves = [x.clone().requires_grad_(), residual.clone().requires_grad_()]
    y, s = fn(*leaves)
    (y.square().sum() + (s * s.detach()).sum()).backward()
    return [y.detach(), s.detach()] + [t.grad for t in leaves] + \
        [p.grad.clone() for p in model.parameters()]


# run()'s results that rmsnorm's kernels produce: y, s, the input gradients (through the
# linear's matmul, the same aten call either way) and the two norms' weight gradients. The
# linear's own weight and bias gradients are Inductor's reductions when compiled: close, but
# summed in another order.
OURS = (0, 1, 2, 3, 4, 7)


def assert_identical(a, b, exact=range(100)):
    assert len(a) == len(b)
    for i, (u, v) in enumerate(zip(a, b)):
        if i in exact:
            assert torch.equal(u, v), f"result {i} differs"
        else:
            torch.testing.assert_close(u, v, rtol=1e-5, atol=1e-6)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def graph_breaks():
    from torch._dynamo.utils import counters
    return sum(counters["graph_break"].values())


def test_compiled_block_matches_eager_forward_and_backward(device):
    model, x, residual = block_and_inputs("compile-block", 6, device)
    x, residual = x.view(2, 3, N), residual.view(2, 3, N)
    eager = run(model, model, x, residual)
    compiled = torch.compile(model, fullgraph=True)
    assert_identical(run(compiled, model, x, residual), eager, exact=OURS)
    assert graph_breaks() == 0


def test_compiled_inference_with_in_place_residual_and_out(device):
    seed = seed_of("compile-inplace")
    x, residual = randn((4, N), torch.bfloat16, device, seed), \
        randn((4, N), torch.bfloat16, device, seed + 1)
    w = weight_for(N, torch.bfloat16, device, seed)

    def step(x, residual, w, out):
        y, s = rmsnorm.fused_add_rms_norm(x, residual, w, inplace=True)
        rmsnorm.rms_norm(y, w, casting_mode="gemma", out=out)
        return y, s

    results = []
    for fn in (step, torch.compile(step, fullgraph=True)):
        r, out = residual.clone(), torch.empty_like(x)
        with torch.no_grad():
            y, s = fn(x, r, w, out)
        assert s is r if fn is step else True
        results.append([y, r, out])
    assert_identical(*results)
    assert graph_breaks() == 0


def _opcheck_cases(d):
    x, r = randn((3, 8), torch.bfloat16, d, 6), randn((3, 8), torch.float32, d, 7)
    w = weight_for(8, torch.bfloat16, d, 6)
    x32, w32 = randn((3, 8), torch.float32, d, 5), weight_for(8, torch.float32, d, 5)
    rstd = torch.rsqrt(x32.pow(2).mean(-1) + 1e-6)
    return {
        "fwd": ((x32, w32, 1e-6, 0.0, "llama", True), True),
        "add_fwd": ((x, r, w, 1e-6, 1.0, "gemma", "rounded", True), True),
        "add_fwd_inplace": ((x, r.clone(), w, 1e-6, 0.0, "llama", "fp32"), False),
        "fwd_into": ((x, r, w, torch.empty(3, 8, dtype=torch.float32, device=d), r.clone(),
                      1e-6, 0.0, "llama", "fp32"), False),
        "bwd": ((x32.clone(), x32, w32, rstd, None, 0.0, "llama", True), False),
    }


@pytest.mark.parametrize("op", ["fwd", "add_fwd", "add_fwd_inplace", "fwd_into", "bwd"])
def test_the_ops_pass_torch_library_opcheck(device, op):
    args, differentiable = _opcheck_cases(device)[op]
    if differentiable:
        args = tuple(a.requires_grad_() if isinstance(a, torch.Tensor) else a for a in args)
    torch.library.opcheck(getattr(torch.ops.rmsnorm, op).default, args,
                          test_utils=("test_schema", "test_faketensor",
                                      "test_autograd_registration"))


cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")


@cuda_only
def test_cuda_graph_replay_of_forward_and_backward_matches_eager():
    model, x, residual = block_and_inputs("cuda-graph", 64, "cuda")
    eager = run(model, model, x, residual)
    graphed = torch.cuda.make_graphed_callables(
        model, (x.clone().requires_grad_(), residual.clone().requires_grad_()))
    assert_identical(run(graphed, model, x, residual), eager)


@cuda_only
def test_cuda_graph_capture_of_in_place_fused_add():
    seed = seed_of("cuda-graph-inplace")
    x = randn((128, 4096), torch.bfloat16, "cuda", seed)
    residual = randn((128, 4096), torch.bfloat16, "cuda", seed + 1)
    w = weight_for(4096, torch.bfloat16, "cuda", seed)
    expected_r = residual.clone()
    expected_y, _ = rmsnorm.fused_add_rms_norm(x, expected_r, w, inplace=True)

    static_r = residual.clone()
    rmsnorm.fused_add_rms_norm(x, static_r.clone(), w, inplace=True)  # compile before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y, _ = rmsnorm.fused_add_rms_norm(x, static_r, w, inplace=True)
    static_r.copy_(residual)
    graph.replay()
    assert torch.equal(y, expected_y) and torch.equal(static_r, expected_r)


@cuda_only
def test_compile_reduce_overhead_matches_eager():
    model, x, residual = block_and_inputs("reduce-overhead", 64, "cuda")
    eager = run(model, model, x, residual)
    compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    for _ in range(3):  # cudagraph trees record on a later call; check the replays
        got = run(compiled, model, x, residual)
    assert_identical(got, eager, exact=OURS)


def test_dynamic_eps_offset_and_shapes_compile_without_breaks_and_match_eager(device):
    # dynamic=True makes eps and offset symbolic: their checks must not be Python that Dynamo
    # cannot trace (they run inside the op, on concrete values).
    def norms(x, residual, w, eps, offset):
        y = rmsnorm.rms_norm(x, w, eps, offset=offset, casting_mode="gemma")
        return rmsnorm.fused_add_rms_norm(y, residual, w, eps, offset=offset)

    compiled = torch.compile(norms, fullgraph=True, dynamic=True)
    w = weight_for(N, torch.float32, device, seed_of("dyn-w"))
    for m, eps, offset in ((4, 1e-6, 0.0), (7, 1e-5, 1.0), (2, 0.25, -0.5), (9, 0.0, 0.75)):
        seed = seed_of("dyn", m)
        x = randn((m, N), torch.float32, device, seed)
        residual = randn((m, N), torch.float32, device, seed + 1)
        for got, expected in zip(compiled(x, residual, w, eps, offset),
                                 norms(x, residual, w, eps, offset)):
            assert torch.equal(got, expected)
    assert graph_breaks() == 0


def test_symbolic_scalars_are_still_checked_when_the_op_runs(device):
    compiled = torch.compile(lambda x, w, eps, offset: rmsnorm.rms_norm(x, w, eps,
                                                                        offset=offset),
                             fullgraph=True, dynamic=True)
    x = randn((4, N), torch.float32, device, seed_of("dyn-bad"))
    w = weight_for(N, torch.float32, device, seed_of("dyn-bad"))
    compiled(x, w, 1e-6, 0.0)
    with pytest.raises(ValueError, match="eps must be >= 0"):
        compiled(x, w, -1.0, 0.0)
    with pytest.raises(ValueError, match="offset must be finite in fp32"):
        compiled(x, w, 1e-6, 1e39)
    with pytest.raises(ValueError, match="offset=1.0 is added to the weight, but weight is "
                                         "None"):
        compiled(x, None, 1e-6, 1.0)


def test_a_compiled_module_follows_a_changed_variance_epsilon(device):
    norm = rmsnorm.RMSNorm(N, device=device)
    with torch.no_grad():
        norm.weight.copy_(weight_for(N, torch.float32, device, seed_of("mod-eps")))
    compiled = torch.compile(norm, fullgraph=True)
    x = randn((5, N), torch.float32, device, seed_of("mod-eps", 1), scale=0.1)
    for eps in (1e-6, 1e-2, 0.5):
        norm.variance_epsilon = eps
        with torch.no_grad():
            assert torch.equal(compiled(x), norm(x))
        leaf = x.clone().requires_grad_()
        y = compiled(leaf)
        y.square().sum().backward()
        expected_leaf = x.clone().requires_grad_()
        norm(expected_leaf).square().sum().backward()
        assert torch.equal(leaf.grad, expected_leaf.grad)
    assert graph_breaks() == 0
