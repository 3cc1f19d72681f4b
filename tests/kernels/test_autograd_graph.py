"""The autograd graph the ops build behaves as PyTorch's own ops' graphs do: one named backward
node per call, its saved tensors freed by the backward, checked against in-place changes, run
through saved-tensor hooks, and no reference cycle through an output it saves."""

import gc
import weakref

import pytest
import torch

import rmsnorm
from helpers import randn, seed_of, weight_for

SHAPE = (6, 96)


def leaves(tag, device, fused, dtype=torch.float32):
    """Fresh x, weight (and the fused add's residual), each a leaf requiring grad."""
    seed = seed_of("autograd-graph", tag, fused)
    x = randn(SHAPE, dtype, device, seed)
    w = weight_for(SHAPE[-1], dtype, device, seed)
    tensors = [x, w] + ([randn(SHAPE, dtype, device, seed + 2)] if fused else [])
    return [t.requires_grad_() for t in tensors]


def forward(fused, x, w, residual=None):
    """(y, residual_out or None) of the op."""
    if fused:
        return rmsnorm.fused_add_rms_norm(x, residual, w)
    return rmsnorm.rms_norm(x, w), None


def loss_of(y, residual_out):
    return y.square().sum() + (residual_out.sum() if residual_out is not None else 0)


@pytest.mark.parametrize("fused", [False, True])
def test_one_named_node_backs_every_output(device, fused):
    y, residual_out = forward(fused, *leaves("name", device, fused))
    want = "rmsnorm::AddNormBackward" if fused else "rmsnorm::NormBackward"
    assert y.grad_fn.name() == want
    if fused:
        assert residual_out.grad_fn.name() == want
        # One node: both outputs' edges lead to it, in output order.
        assert y.grad_fn.next_functions == residual_out.grad_fn.next_functions


@pytest.mark.parametrize("fused", [False, True])
def test_backward_frees_the_saved_tensors_so_a_second_backward_is_refused(device, fused):
    inputs = leaves("twice", device, fused)
    outputs = [t for t in forward(fused, *inputs) if t is not None]
    # The outputs' gradients given directly: no node but the op's saves anything.
    grads = [randn(t.shape, t.dtype, device, seed_of("twice-grad", i))
             for i, t in enumerate(outputs)]
    torch.autograd.backward(outputs, grads, retain_graph=True)
    first = [t.grad.clone() for t in inputs]
    torch.autograd.backward(outputs, grads)  # retained: runs again, and accumulates the same
    for t, g in zip(inputs, first):
        torch.testing.assert_close(t.grad, 2 * g, rtol=1e-6, atol=1e-6)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        torch.autograd.backward(outputs, grads)


def test_an_input_changed_in_place_after_the_forward_is_caught_on_backward(device):
    x, w = leaves("in-place", device, False)
    hidden = x * 1.0  # a non-leaf activation, changed after the norm saved it
    y, _ = forward(False, hidden, w)
    hidden.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_the_fused_adds_saved_sum_changed_in_place_is_caught_on_backward(device):
    y, residual_out = forward(True, *leaves("in-place-sum", device, True))
    residual_out.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


@pytest.mark.parametrize("fused", [False, True])
def test_saved_tensor_hooks_pack_and_unpack_what_the_backward_uses(device, fused):
    inputs = leaves("hooks", device, fused)
    want = torch.autograd.grad(loss_of(*forward(fused, *inputs)), inputs)
    packed, unpacked = [], []

    def pack(t):  # as activation offloading does: a copy, kept elsewhere
        packed.append(t)
        return t.detach().clone()

    def unpack(t):
        unpacked.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        outputs = forward(fused, *inputs)
    loss = loss_of(*outputs)
    # The norm's input (the sum for the fused add), the weight and rstd.
    norm_input = forward(fused, *inputs)[1] if fused else inputs[0]
    assert len(packed) == 3 and any(p.shape == norm_input.shape for p in packed)
    got = torch.autograd.grad(loss, inputs)
    assert len(unpacked) == len(packed)
    for g, expected in zip(got, want):
        assert torch.equal(g, expected)


@pytest.mark.parametrize("fused", [False, True])
def test_dropping_the_outputs_frees_the_graph_and_what_it_saved(device, fused):
    y, residual_out = forward(fused, *leaves("cycle", device, fused))
    # A node holding its own output (the fused add saves the sum it returns) would keep
    # itself and that output alive: PyTorch keeps a tensor's Python object while C++ owns it.
    refs = [weakref.ref(t) for t in (y, residual_out) if t is not None]
    del y, residual_out
    gc.collect()
    assert all(r() is None for r in refs)


def test_compiled_autograd_is_refused_by_name_as_not_done(device):
    x, w = leaves("compiled-autograd", device, False)
    y, _ = forward(False, x, w)
    compiled_autograd = pytest.importorskip("torch._dynamo.compiled_autograd")
    with pytest.raises(NotImplementedError, match="rmsnorm: compiled autograd does not support "
                                                  "rmsnorm::NormBackward yet"):
        with compiled_autograd._enable(torch.compile(backend="eager")):
            y.sum().backward()
