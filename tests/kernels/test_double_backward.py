"""Double backward (create_graph=True): the first-order gradients carry a graph, so gradient
penalties and other higher-order losses are right, through the ops' C++ autograd
(rmsnorm/pytorch/csrc/autograd.cpp), reached two ways:

- "eager": the public functions;
- "op": torch.ops.rmsnorm.fwd/add_fwd called directly (as DTensor inputs, checked on two
  ranks at the end, and torch.compile's backend="eager" reach them).

Under torch.compile with AOTAutograd (the default backend) a double backward is refused by
PyTorch itself, with an error naming torch.compile; the tests pin that too.
"""

import pytest
import torch
import torch.nn.functional as F

import dist_world
import rmsnorm
from rmsnorm import reference
from rmsnorm.launch import ops
import helpers
from helpers import randn, seed_of, weight_for

F64 = torch.float64
EPS = 1e-6
ROUTES = ("eager", "op")


def norm_fn(route, casting_mode, offset):
    """y = f(x, w) (w may be None) on one route."""
    if route == "eager":
        return lambda x, w: rmsnorm.rms_norm(x, w, EPS, offset=offset,
                                             casting_mode=casting_mode)
    return lambda x, w: torch.ops.rmsnorm.fwd(x, w, EPS, offset, casting_mode, True)[0]


def add_fn(route, casting_mode, offset):
    """(y, s) = f(x, residual, w) on one route."""
    if route == "eager":
        return lambda x, r, w: rmsnorm.fused_add_rms_norm(x, r, w, EPS, offset=offset,
                                                          casting_mode=casting_mode)
    return lambda x, r, w: torch.ops.rmsnorm.add_fwd(x, r, w, EPS, offset, casting_mode,
                                                      "rounded", True)[:2]


def leaves(*tensors):
    return [None if t is None else t.detach().clone().requires_grad_() for t in tensors]


def rel_err(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / b.norm()).item()


# --- gradgradcheck in float64 ---

NORM_CASES = [  # (casting_mode, offset, with_weight, shape)
    ("llama", 0.0, True, (3, 8)), ("gemma", 0.0, True, (2, 3, 8)),
    ("gemma", 1.0, True, (3, 8)), ("llama", 0.5, True, (2, 3, 8)),
    ("llama", 0.0, False, (2, 3, 8)), ("gemma", 0.0, False, (3, 8)),
]


def gradgradcheck(fn, inputs, device):
    # Full Jacobians on the GPU; random projections of them under the slow interpreter.
    assert torch.autograd.gradgradcheck(fn, inputs, fast_mode=device == "cpu")


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("casting_mode,offset,with_weight,shape", NORM_CASES)
def test_gradgradcheck_rms_norm(device, route, casting_mode, offset, with_weight, shape):
    seed = seed_of("ggc-norm", casting_mode, offset, with_weight, shape)
    x = randn(shape, F64, device, seed)
    fn = norm_fn(route, casting_mode, offset)
    if with_weight:
        gradgradcheck(fn, leaves(x, weight_for(shape[-1], F64, device, seed)), device)
    else:
        gradgradcheck(lambda a: fn(a, None), leaves(x), device)


ADD_CASES = [("llama", 0.0, True, (3, 8)), ("gemma", 1.0, True, (2, 3, 8)),
             ("llama", 0.0, False, (3, 8))]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("casting_mode,offset,with_weight,shape", ADD_CASES)
def test_gradgradcheck_fused_add_rms_norm(device, route, casting_mode, offset, with_weight,
                                          shape):
    seed = seed_of("ggc-add", casting_mode, offset, with_weight, shape)
    x, res = randn(shape, F64, device, seed), randn(shape, F64, device, seed + 1)
    fn = add_fn(route, casting_mode, offset)
    if with_weight:
        gradgradcheck(fn, leaves(x, res, weight_for(shape[-1], F64, device, seed)), device)
    else:
        gradgradcheck(lambda a, b: fn(a, b, None), leaves(x, res), device)


# --- a gradient penalty against torch.nn.functional.rms_norm and the reference recipes ---

def recipe(casting_mode, offset, dtype):
    """The PyTorch recipe the norm claims to match, differentiable to any order."""
    if dtype == F64:
        return lambda x, w: reference.float64_rms_norm(x, w, EPS, offset)
    if casting_mode == "gemma" and offset == 0.0:
        return lambda x, w: F.rms_norm(x, (x.shape[-1],), w, EPS)
    if casting_mode == "gemma" and offset == 1.0:
        return lambda x, w: reference.hf_gemma_rms_norm(x, w, EPS)
    if casting_mode == "llama" and offset == 0.0:
        return lambda x, w: reference.hf_llama_rms_norm(x, w, EPS)
    return lambda x, w: reference.contract_rms_norm(x, w, EPS, offset=offset,
                                                    casting_mode=casting_mode)[0]


def penalty_grads(fn, x, w, penalize_w=False):
    """Gradients (x, w) of y.sum() + |d(y^2).sum()/dx|^2, a gradient penalty (with
    penalize_w, + |d(y^2).sum()/dw|^2 too)."""
    x, w = leaves(x, w)
    y = fn(x, w)
    inner = y.square().sum()
    if penalize_w:
        gx, gw = torch.autograd.grad(inner, (x, w), create_graph=True)
        (y.sum() + gx.square().sum() + gw.square().sum()).backward()
    else:
        (gx,) = torch.autograd.grad(inner, x, create_graph=True)
        (y.sum() + gx.square().sum()).backward()
    return x.grad, w.grad


def add_penalty_grads(fn, x, res, w):
    """The same through the fused add, with the sum s in the inner loss too (its gradient
    d(residual_out) then enters the first-order gradients) and a penalty on both addends."""
    x, res, w = leaves(x, res, w)
    y, s = fn(x, res, w)
    gx, gr = torch.autograd.grad(y.square().sum() + (s * s).sum(), (x, res),
                                 create_graph=True)
    (y.sum() + s.sum() + gx.square().sum() + 0.5 * gr.square().sum()).backward()
    return x.grad, res.grad, w.grad


# Norm-wise relative error of the penalty's gradients against the recipe: float64 at rounding
# level; float32 from two different fp32 evaluations of second-order terms.
PENALTY_RTOL = {F64: 1e-12, torch.float32: 5e-6}
PENALTY_CASES = [("gemma", 0.0), ("llama", 0.0), ("gemma", 1.0), ("llama", 0.5)]


@pytest.mark.parametrize("dtype", [F64, torch.float32])
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("casting_mode,offset", PENALTY_CASES)
def test_gradient_penalty_matches_the_recipe(device, dtype, route, casting_mode, offset):
    seed = seed_of("penalty", dtype, casting_mode, offset)
    x = randn((5, 16), dtype, device, seed)
    w = weight_for(16, dtype, device, seed) - offset
    got = penalty_grads(norm_fn(route, casting_mode, offset), x, w)
    want = penalty_grads(recipe(casting_mode, offset, dtype), x, w)
    for g, r in zip(got, want):
        assert g.dtype == r.dtype
        assert rel_err(g, r) <= PENALTY_RTOL[dtype]


@pytest.mark.parametrize("dtype", [F64, torch.float32])
@pytest.mark.parametrize("route", ROUTES)
def test_gradient_penalty_without_weight_matches_f_rms_norm(device, dtype, route):
    # Without a weight, y.square().sum() is n * ms / (ms + eps) per row, nearly constant: the
    # inner loss weights the elements instead.
    seed = seed_of("penalty-no-w", dtype)
    x, c = randn((2, 3, 16), dtype, device, seed), randn((2, 3, 16), dtype, device, seed + 1)
    fn = norm_fn(route, "llama", 0.0)

    def grads_of(f):
        (xl,) = leaves(x)
        y = f(xl)
        (gx,) = torch.autograd.grad((c * y.square()).sum(), xl, create_graph=True)
        (y.sum() + gx.square().sum()).backward()
        return xl.grad

    got = grads_of(lambda a: fn(a, None))
    want = grads_of(lambda a: F.rms_norm(a, (16,), None, EPS))
    assert rel_err(got, want) <= PENALTY_RTOL[dtype]


@pytest.mark.parametrize("dtype", [F64, torch.float32])
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("casting_mode,offset", [("gemma", 0.0), ("llama", 0.5)])
def test_fused_add_gradient_penalty_matches_the_recipe(device, dtype, route, casting_mode,
                                                       offset):
    seed = seed_of("add-penalty", dtype, casting_mode, offset)
    x, res = randn((2, 3, 16), dtype, device, seed), randn((2, 3, 16), dtype, device, seed + 1)
    w = weight_for(16, dtype, device, seed)
    norm = recipe(casting_mode, offset, dtype)

    def unfused(a, b, c):
        s = reference.residual_add(a, b)
        return norm(s, c), s

    got = add_penalty_grads(add_fn(route, casting_mode, offset), x, res, w)
    want = add_penalty_grads(unfused, x, res, w)
    for g, r in zip(got, want):
        assert rel_err(g, r) <= PENALTY_RTOL[dtype]


@pytest.mark.parametrize("route", ROUTES)
def test_bf16_llama_penalty_treats_the_rounding_of_xhat_as_identity(device, route):
    # "llama" rounds xhat to bf16 for dw; the second-order terms see that rounding as the
    # identity (straight-through), so a penalty on dw stays within bf16 noise of the float64
    # ground truth, which does not round at all (a rounding with zero derivative would leave
    # out d|dw|^2/dx: x.grad off by about 50% here).
    seed = seed_of("penalty-bf16")
    x = randn((6, 32), torch.bfloat16, device, seed)
    w = weight_for(32, torch.float32, device, seed)
    got = penalty_grads(norm_fn(route, "llama", 0.0), x, w, penalize_w=True)
    want = penalty_grads(recipe("llama", 0.0, F64), x.double(), w.double(), penalize_w=True)
    for g, r in zip(got, want):
        assert rel_err(g, r) <= 2 ** -6


# --- the first-order gradients under create_graph=True ---

class CountedBackward:
    """Counts calls of the launcher's backward (the kernels), which serves every call while
    the test runs (the compiled kernels switched off)."""

    def __init__(self, monkeypatch):
        self.calls, real = 0, ops.backward

        def counted(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(ops, "backward", counted)


@pytest.fixture
def launcher_only():
    """The launcher's backward is what CountedBackward counts: it serves every call."""
    with helpers.launcher_only():
        yield


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("fused", [False, True])
def test_first_order_gradients_with_a_graph_equal_the_kernels(device, monkeypatch, dtype,
                                                              route, fused, launcher_only):
    """create_graph=True computes the first-order gradients with a differentiable PyTorch
    formula of the same contract (rstd recomputed from x, other reduction orders), so they
    equal the kernels' within fp32 rounding noise, not bit for bit; create_graph=False keeps
    the kernels (bit-identical to ops.backward)."""
    seed = seed_of("first-order", dtype, route, fused)
    shape = (7, 40)
    x, res = randn(shape, dtype, device, seed), randn(shape, dtype, device, seed + 1)
    w = weight_for(40, dtype, device, seed)
    dy, ds = randn(shape, dtype, device, seed + 2), randn(shape, dtype, device, seed + 3)
    counter = CountedBackward(monkeypatch)

    def first_order(create_graph):
        xl, rl, wl = leaves(x, res, w)
        if fused:
            outs, inputs, grads = add_fn(route, "llama", 0.0)(xl, rl, wl), (xl, rl, wl), \
                (dy, ds)
        else:
            outs, inputs, grads = (norm_fn(route, "llama", 0.0)(xl, wl),), (xl, wl), (dy,)
        return torch.autograd.grad(outs, inputs, grads, create_graph=create_graph)

    plain = first_order(False)
    assert counter.calls == 1 and not any(g.requires_grad for g in plain)
    graphed = first_order(True)
    assert counter.calls == 1  # the formula, not the kernels
    assert all(g.requires_grad for g in graphed)
    for g, k in zip(graphed, plain):
        assert g.dtype == k.dtype and g.shape == k.shape
        if dtype == torch.float32:
            torch.testing.assert_close(g, k, rtol=1e-5, atol=1e-6)
        else:  # rounded to bf16 from fp32 values a few fp32 ulps apart: one bf16 ulp at most
            step = torch.nextafter(k.abs(), torch.full_like(k, float("inf"))) - k.abs()
            assert ((g.float() - k.float()).abs() <= step.float()).all()


# --- torch.compile ---

@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("fused", [False, True])
def test_compiled_with_the_eager_backend_double_backward_matches_f_rms_norm(
        device, fresh_dynamo, fused):
    # Dynamo traces the custom ops; autograd then runs their registered formula eagerly.
    seed = seed_of("compile-eager-backend", fused)
    x, res = randn((4, 16), F64, device, seed), randn((4, 16), F64, device, seed + 1)
    w = weight_for(16, F64, device, seed)
    if fused:
        fn = torch.compile(lambda a, c: rmsnorm.fused_add_rms_norm(a, res, c,
                                                                   casting_mode="gemma")[0],
                           backend="eager", fullgraph=True)
        want_fn = lambda a, c: F.rms_norm(a + res, (16,), c, 1e-6)  # noqa: E731
    else:
        fn = torch.compile(lambda a, c: rmsnorm.rms_norm(a, c, casting_mode="gemma"),
                           backend="eager", fullgraph=True)
        want_fn = lambda a, c: F.rms_norm(a, (16,), c, 1e-6)  # noqa: E731
    got = penalty_grads(fn, x, w)
    want = penalty_grads(want_fn, x, w)
    for g, r in zip(got, want):
        assert rel_err(g, r) <= 1e-10


@pytest.mark.parametrize("fused", [False, True])
def test_compiled_with_aot_autograd_double_backward_raises_a_clear_error(device, fresh_dynamo,
                                                                         fused):
    # AOTAutograd compiles the backward ahead of time without a graph of its own; PyTorch
    # refuses the double backward (for any compiled function, F.rms_norm's too) rather than
    # return wrong values. The first-order gradients of create_graph=True still come.
    seed = seed_of("compile-aot", fused)
    x, res = randn((4, 16), torch.float32, device, seed), \
        randn((4, 16), torch.float32, device, seed + 1)
    w = weight_for(16, torch.float32, device, seed)
    if fused:
        fn = torch.compile(lambda a, c: rmsnorm.fused_add_rms_norm(a, res, c)[0],
                           fullgraph=True)
    else:
        fn = torch.compile(lambda a, c: rmsnorm.rms_norm(a, c), fullgraph=True)
    xl, wl = leaves(x, w)
    y = fn(xl, wl)
    (gx,) = torch.autograd.grad(y.square().sum(), xl, create_graph=True)
    (want,) = torch.autograd.grad(
        (rmsnorm.fused_add_rms_norm(xl, res, wl)[0] if fused else rmsnorm.rms_norm(xl, wl))
        .square().sum(), xl)
    assert torch.equal(gx.detach(), want)  # the compiled graph runs the same kernels
    with pytest.raises(RuntimeError, match="torch.compile .*double backward"):
        gx.square().sum().backward()


# --- DTensor (the custom ops' route on sharded inputs; two ranks as in test_distributed.py) ---

@pytest.fixture(scope="module")
def world(tmp_path_factory):
    if dist_world.why_not():
        pytest.skip(dist_world.why_not())
    w = dist_world.World(str(tmp_path_factory.mktemp("dist") / "rendezvous"))
    yield w
    if w.procs:
        w.close()


def dtensor_inputs(on):
    seed = seed_of("dtensor-penalty")
    return (randn((2, 6, 16), F64, on, seed), randn((2, 6, 16), F64, on, seed + 1),
            weight_for(16, F64, on, seed))


def dtensor_penalties(x, res, w, distribute=None, gather=None):
    """x.grad, residual.grad, w.grad of the gradient penalties of rms_norm(x) and of the fused
    add; `distribute` makes the leaves (x, residual, w) DTensors, `gather` the gradients whole
    tensors again."""
    x, res, w = leaves(*(distribute(x, res, w) if distribute else (x, res, w)))
    y1 = rmsnorm.rms_norm(x, w, offset=0.5)
    y2, s = rmsnorm.fused_add_rms_norm(x, res, w, casting_mode="gemma")
    gx, gr, gw = torch.autograd.grad(y1.square().sum() + y2.square().sum() + (s * s).sum(),
                                     (x, res, w), create_graph=True)
    loss = y1.sum() + y2.sum() + gx.square().sum() + gr.square().sum() + gw.square().sum()
    loss.backward()
    return [(gather(t.grad) if gather else t.grad).detach().cpu() for t in (x, res, w)]


def on_ranks_dtensor_penalty():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh(dist_world.device().type, (dist_world.WORLD_SIZE,))

    def distribute(x, res, w):
        rows = [Shard(1)]
        return (distribute_tensor(x, mesh, rows), distribute_tensor(res, mesh, rows),
                distribute_tensor(w, mesh, [Replicate()]))

    return dtensor_penalties(*dtensor_inputs(dist_world.device()), distribute,
                             lambda t: t.full_tensor())


def test_dtensor_double_backward_matches_one_process(world):
    on_ranks = world.run(on_ranks_dtensor_penalty)
    want = dtensor_penalties(*dtensor_inputs(torch.device(dist_world.device_type())))
    for got in on_ranks:
        for g, r in zip(got, want):
            assert rel_err(g, r) <= 1e-12
