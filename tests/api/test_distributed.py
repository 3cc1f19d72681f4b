"""rmsnorm under PyTorch's distributed engine: DTensor, FSDP2, tensor and sequence parallelism.

Two worker processes (tests/dist_world.py: gloo on the CPU with the kernels in Triton's
interpreter, or NCCL on two GPUs) run each test's `on_ranks_*` function; the test holds what
they return against one process running the same inputs here. Rows are normalized on their
own, so whatever one row gets (y, the sum s, dx, rstd) must be bit-identical to the
single-process result; the weight gradient is a sum over rows, which a sharded run splits
into one partial sum per rank: each partial must be bit-identical to one process's dw over
the same rows, and their sum close to the one-process dw (fp32, summed in another order).
Where linear layers are sharded too (tensor parallelism), their matmuls sum in another order
as well, and module outputs are compared within fp32 tolerances.
"""

import os
import subprocess
import sys

import pytest
import torch

import dist_world
from dist_world import device
from helpers import NormBlock, randn, seed_of, weight_for

if dist_world.why_not():
    pytest.skip(dist_world.why_not(), allow_module_level=True)

import rmsnorm  # noqa: E402
from rmsnorm.launch import ops  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import (DTensor, Partial, Replicate, Shard,  # noqa: E402
                                      distribute_tensor)

N = 32
RANKS = dist_world.WORLD_SIZE
HERE = torch.device(dist_world.device_type())  # where the single-process reference runs


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = dist_world.World(str(tmp_path_factory.mktemp("dist") / "rendezvous"))
    yield w
    w.close()


def shard_of(t, placement, rank):
    """What `rank` holds of t under a one-dimensional mesh placement (torch.chunk's split,
    as DTensor's)."""
    if isinstance(placement, Shard):
        return t.chunk(RANKS, placement.dim)[rank]
    return t


def local_rows(t, placement):
    return [shard_of(t, placement, r) for r in range(RANKS)]


def to_cpu(tree):
    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu()
    if isinstance(tree, dict):
        return {k: to_cpu(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(to_cpu(v) for v in tree)
    return tree


class Seen:
    """The shapes of x that rmsnorm's launcher is called with (forward and backward), in a
    worker: the proof that a rank normalizes its shard, not a gathered full tensor."""

    def __enter__(self):
        self.forward, self.backward = [], []
        self._calls = ops.forward, ops.backward

        def forward(x, *args, **kwargs):
            self.forward.append(tuple(x.shape))
            return self._calls[0](x, *args, **kwargs)

        def backward(dy, x, *args, **kwargs):
            self.backward.append(tuple(x.shape))
            return self._calls[1](dy, x, *args, **kwargs)

        ops.forward, ops.backward = forward, backward
        return self

    def __exit__(self, *exc):
        ops.forward, ops.backward = self._calls


def mesh_1d():
    return init_device_mesh(device().type, (RANKS,))


def inputs(tag, shape, dtype, w_dtype, on):
    seed = seed_of(tag, shape)
    return (randn(shape, dtype, on, seed), weight_for(shape[-1], w_dtype, on, seed),
            randn(shape, dtype, on, seed + 7))  # x, weight, and a gradient for y


# --- rms_norm on a sharded x ---

NORM_CASES = {
    # id: (placement, shape, x dtype, weight dtype, offset, casting_mode)
    "batch-shard": (Shard(0), (2, 8, N), torch.float32, torch.float32, 0.0, "llama"),
    "sequence-shard-bf16": (Shard(1), (2, 8, N), torch.bfloat16, torch.float32, 0.0, "llama"),
    "uneven-sequence-shard-gemma": (Shard(1), (2, 7, N), torch.float32, torch.float32, 1.0,
                                    "gemma"),
    "replicated": (Replicate(), (2, 8, N), torch.float32, torch.float32, 0.0, "llama"),
}


def on_ranks_rms_norm(case):
    placement, shape, dtype, w_dtype, offset, mode = NORM_CASES[case]
    mesh = mesh_1d()
    x, w, gy = inputs(case, shape, dtype, w_dtype, device())
    x = distribute_tensor(x, mesh, [placement]).requires_grad_()
    w = distribute_tensor(w, mesh, [Replicate()]).requires_grad_()
    with Seen() as seen:
        y = rmsnorm.rms_norm(x, w, 1e-5, offset=offset, casting_mode=mode)
        y.backward(distribute_tensor(gy, mesh, [placement]))
    return to_cpu(dict(
        placements=(y.placements, x.grad.placements, w.grad.placements),
        y=y.to_local(), dx=x.grad.to_local(), dw_local=w.grad.to_local(),
        dw=w.grad.full_tensor(), seen=(seen.forward, seen.backward)))


def one_process_norm(x, w, gy, offset, mode):
    x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
    y = rmsnorm.rms_norm(x, w, 1e-5, offset=offset, casting_mode=mode)
    y.backward(gy)
    return y.detach(), x.grad, w.grad


@pytest.mark.parametrize("case", NORM_CASES)
def test_rms_norm_runs_on_local_shards(world, case):
    placement, shape, dtype, w_dtype, offset, mode = NORM_CASES[case]
    x, w, gy = inputs(case, shape, dtype, w_dtype, HERE)
    y, dx, dw = to_cpu(one_process_norm(x, w, gy, offset, mode))
    sharded = isinstance(placement, Shard)
    dw_parts = []
    for rank, got in enumerate(world.run(on_ranks_rms_norm, case)):
        rows = shard_of(x, placement, rank)
        # Outputs and dx keep x's placement; dw is a partial sum per rank when x is sharded.
        assert got["placements"] == ((placement,), (placement,),
                                     (Partial(),) if sharded else (Replicate(),))
        # The kernels saw this rank's rows only.
        assert got["seen"] == ([tuple(rows.shape)], [tuple(rows.shape)])
        assert torch.equal(got["y"], shard_of(y, placement, rank))
        assert torch.equal(got["dx"], shard_of(dx, placement, rank))
        _, _, dw_rows = to_cpu(one_process_norm(rows, w, shard_of(gy, placement, rank),
                                                offset, mode))
        assert torch.equal(got["dw_local"], dw_rows if sharded else dw)
        dw_parts.append(got["dw"])
    assert torch.equal(dw_parts[0], dw_parts[1])  # every rank sees the reduced dw
    if sharded:
        # The reduction of two partials is their fp32 sum, a single rounding.
        parts = [to_cpu(one_process_norm(r, w, g, offset, mode))[2]
                 for r, g in zip(local_rows(x, placement), local_rows(gy, placement))]
        assert torch.equal(dw_parts[0], parts[0] + parts[1])
        torch.testing.assert_close(dw_parts[0], dw, rtol=1e-5, atol=1e-5)
    else:
        assert torch.equal(dw_parts[0], dw)


# --- the fused residual add ---

def add_inputs(on):
    x, w, gy = inputs("fused-add", (2, 8, N), torch.bfloat16, torch.float32, on)
    residual = randn((2, 8, N), torch.float32, on, seed_of("residual"))  # fp32 stream
    gs = randn((2, 8, N), torch.float32, on, seed_of("ds"))
    return x, residual, w, gy, gs


def on_ranks_fused_add():
    mesh = mesh_1d()
    x, residual, w, gy, gs = add_inputs(device())
    shard = lambda t: distribute_tensor(t, mesh, [Shard(1)])  # noqa: E731
    x, residual = shard(x).requires_grad_(), shard(residual).requires_grad_()
    w = distribute_tensor(w, mesh, [Replicate()]).requires_grad_()
    y, s = rmsnorm.fused_add_rms_norm(x, residual, w)
    torch.autograd.backward([y, s], [shard(gy), shard(gs)])
    trained = dict(placements=[t.placements for t in (y, s, x.grad, residual.grad)],
                   y=y.to_local(), s=s.to_local(), dx=x.grad.to_local(),
                   residual_grad=residual.grad.to_local(), dw=w.grad.full_tensor())
    # Inference: the sum written into the residual DTensor itself, y into out.
    with torch.no_grad():
        res = residual.detach().clone()
        out = torch.empty_like(y)
        y2, s2 = rmsnorm.fused_add_rms_norm(x.detach(), res, w.detach(), inplace=True, out=out)
        inference = dict(same=(y2 is out, s2 is res), y=out.to_local(), s=res.to_local())
    return to_cpu(dict(trained=trained, inference=inference))


def test_fused_add_keeps_the_residual_placement(world):
    x, residual, w, gy, gs = add_inputs(HERE)
    leaves = [t.clone().requires_grad_() for t in (x, residual, w)]
    y, s = rmsnorm.fused_add_rms_norm(*leaves)
    torch.autograd.backward([y, s], [gy, gs])
    y, s, dx, residual_grad, dw = to_cpu([y, s] + [t.grad for t in leaves])
    for rank, got in enumerate(world.run(on_ranks_fused_add)):
        mine = lambda t: shard_of(t, Shard(1), rank)  # noqa: E731
        trained, inference = got["trained"], got["inference"]
        assert all(p == (Shard(1),) for p in trained["placements"])
        for name, want in (("y", y), ("s", s), ("dx", dx), ("residual_grad", residual_grad)):
            assert torch.equal(trained[name], mine(want)), name
        assert trained["dx"].dtype == torch.bfloat16
        assert trained["residual_grad"].dtype == torch.float32
        torch.testing.assert_close(trained["dw"], dw, rtol=1e-5, atol=1e-5)
        assert inference["same"] == (True, True)
        assert torch.equal(inference["y"], mine(y)) and torch.equal(inference["s"], mine(s))


# --- a split last dimension ---

def on_ranks_last_dim():
    mesh = mesh_1d()
    x, w, _ = inputs("last-dim", (2, 8, N), torch.float32, torch.float32, device())
    x, w = distribute_tensor(x, mesh, [Shard(2)]), distribute_tensor(w, mesh, [Replicate()])
    errors = []
    for call in (lambda: rmsnorm.rms_norm(x, w),
                 lambda: rmsnorm.fused_add_rms_norm(x.redistribute(mesh, [Shard(1)]), x, w),
                 lambda: torch.ops.rmsnorm.fwd(x, w, 1e-6, 0.0, "llama", False)):
        try:
            call()
            errors.append(None)
        except (ValueError, RuntimeError) as e:
            errors.append((type(e).__name__, str(e)))
    # Made explicit by the caller, the gather works.
    y = rmsnorm.rms_norm(x.redistribute(mesh, [Replicate()]), w)
    return to_cpu(dict(errors=errors, y=y.full_tensor(), placement=y.placements))


def test_a_split_last_dimension_is_refused_with_the_reason(world):
    x, w, _ = inputs("last-dim", (2, 8, N), torch.float32, torch.float32, HERE)
    for got in world.run(on_ranks_last_dim):
        direct, fused, op = got["errors"]
        assert direct[0] == "ValueError" and fused[0] == "ValueError"
        assert direct[1].startswith("rmsnorm: x is sharded on its last dimension")
        assert fused[1].startswith("rmsnorm: residual is sharded on its last dimension")
        assert "redistribute" in direct[1]
        # Called directly, the op fails in DTensor's sharding propagation, which keeps the
        # message.
        assert op[0] == "RuntimeError" and "x is sharded on its last dimension" in op[1]
        assert got["placement"] == (Replicate(),)
        assert torch.equal(got["y"], rmsnorm.rms_norm(x, w).cpu())


# --- the ops' non-tensor arguments reach DTensor's sharding cache ---

def on_ranks_rstd_placements():
    # The op is called directly, not through a public function that registers the sharding
    # rules on the first DTensor it sees: importing rmsnorm.integrations.dtensor registers them.
    import rmsnorm.integrations.dtensor  # noqa: F401

    mesh = mesh_1d()
    x, w, _ = inputs("rstd", (2, 8, N), torch.float32, torch.float32, device())
    x, w = distribute_tensor(x, mesh, [Shard(1)]), distribute_tensor(w, mesh, [Replicate()])
    shapes = []
    for save_rstd in (True, False, True):
        _, rstd = torch.ops.rmsnorm.fwd(x, w, 1e-6, 0.0, "llama", save_rstd)
        shapes.append((rstd.placements, tuple(rstd.shape), tuple(rstd.to_local().shape)))
    return shapes


def test_rstd_follows_x_when_saved_and_is_empty_otherwise(world):
    saved = ((Shard(1),), (2, 8), (2, 4))
    unsaved = ((Replicate(),), (0,), (0,))
    for got in world.run(on_ranks_rstd_placements):
        assert got == [saved, unsaved, saved]


# --- modules: FSDP2, sequence parallelism, torch.compile ---

def block_inputs(on, shape=(4, 8, N)):
    return [randn(shape, torch.float32, on, seed_of("block", i)) for i in range(4)]


def one_process_block(x, residual, gy, gs):
    block = NormBlock(N, HERE)
    leaves = [x.clone().requires_grad_(), residual.clone().requires_grad_()]
    y, s = block(*leaves)
    torch.autograd.backward([y, s], [gy, gs])
    return to_cpu(dict(y=y, s=s, dx=leaves[0].grad, residual_grad=leaves[1].grad,
                       grads={n: p.grad for n, p in block.named_parameters()}))


def on_ranks_fsdp2(compiled):
    from torch._dynamo.utils import counters
    from torch.distributed.fsdp import fully_shard

    torch._dynamo.reset()
    counters.clear()
    mesh, rank = mesh_1d(), torch.distributed.get_rank()
    block = NormBlock(N, device())
    # As torchtitan: compile the block, then shard it (FSDP2's hooks stay outside the graph).
    run = torch.compile(block, fullgraph=True) if compiled else block
    fully_shard(run, mesh=mesh)
    # Data parallel: each rank takes half of the batch.
    x, residual, gy, gs = (t.chunk(RANKS)[rank] for t in block_inputs(device()))
    with Seen() as seen:
        y, s = run(x, residual)
        torch.autograd.backward([y, s], [gy, gs])
    return to_cpu(dict(y=y, s=s, seen=None if compiled else seen.forward,
                       grads={n: p.grad.full_tensor() for n, p in block.named_parameters()},
                       sharded=[type(p.grad).__name__ for p in block.parameters()],
                       graph_breaks=sum(counters["graph_break"].values())))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_fsdp2_sharded_module_matches_one_process(world, compiled):
    x, residual, gy, gs = block_inputs(HERE)
    full = one_process_block(x, residual, gy, gs)
    for rank, got in enumerate(world.run(on_ranks_fsdp2, compiled)):
        mine = one_process_block(*(t.chunk(RANKS)[rank] for t in (x, residual, gy, gs)))
        assert got["graph_breaks"] == 0
        if not compiled:
            assert got["seen"] == [(2, 8, N)] * 2
        assert torch.equal(got["y"], mine["y"]) and torch.equal(got["s"], mine["s"])
        assert got["sharded"] == ["DTensor"] * 4
        # FSDP2 averages the ranks' gradients (its reduce-scatter divides by the world size).
        for name, g in got["grads"].items():
            torch.testing.assert_close(g, full["grads"][name] / RANKS, rtol=1e-5, atol=1e-6)


def sequence_parallel_plan():
    from torch.distributed.tensor.parallel import ColwiseParallel

    from rmsnorm.integrations.dtensor import SequenceParallel

    # norm1 and norm2 on sequence shards; the linear in between gathers the sequence and
    # gives its output back sharded on the sequence (torch's own layouts and collectives).
    return {"norm1": SequenceParallel(), "norm2": SequenceParallel(),
            "proj": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(1),
                                    use_local_output=False)}


def on_ranks_sequence_parallel(compiled):
    from torch._dynamo.utils import counters
    from torch.distributed.tensor.parallel import parallelize_module

    torch._dynamo.reset()
    counters.clear()
    mesh, rank = mesh_1d(), torch.distributed.get_rank()
    block = parallelize_module(NormBlock(N, device()), mesh, sequence_parallel_plan())
    run = torch.compile(block, fullgraph=True) if compiled else block
    # The inputs arrive as local sequence shards (plain tensors), as after an embedding
    # with sequence-sharded output.
    x, residual, gy, gs = (t.chunk(RANKS, 1)[rank] for t in block_inputs(device()))
    x, residual = x.requires_grad_(), residual.requires_grad_()
    with Seen() as seen:
        y, s = run(x, residual)
        torch.autograd.backward([y, s], [DTensor.from_local(g, mesh, [Shard(1)])
                                         for g in (gy, gs)])
    return to_cpu(dict(
        placements=(y.placements, s.placements), y=y.to_local(), s=s.to_local(),
        dx=x.grad, residual_grad=residual.grad, seen=seen.forward if not compiled else None,
        weight_grads={n: p.grad.full_tensor() for n, p in block.named_parameters()},
        graph_breaks=sum(counters["graph_break"].values())))


def test_sequence_parallel_block_matches_one_process(world):
    x, residual, gy, gs = block_inputs(HERE)
    full = one_process_block(x, residual, gy, gs)
    for rank, got in enumerate(world.run(on_ranks_sequence_parallel, False)):
        mine = lambda t: t.chunk(RANKS, 1)[rank]  # noqa: E731
        assert got["placements"] == ((Shard(1),), (Shard(1),))
        assert got["seen"] == [(4, 4, N)] * 2  # both norms on the local half of the sequence
        for name in ("y", "s", "dx", "residual_grad"):
            torch.testing.assert_close(got[name], mine(full[name]), rtol=1e-5, atol=1e-6)
        for name, g in got["weight_grads"].items():
            torch.testing.assert_close(g, full["grads"][name], rtol=1e-5, atol=1e-5)


def test_sequence_parallel_block_compiles_without_graph_breaks(world):
    eager = world.run(on_ranks_sequence_parallel, False)
    compiled = world.run(on_ranks_sequence_parallel, True)
    for e, c in zip(eager, compiled):
        assert c["graph_breaks"] == 0
        assert c["placements"] == e["placements"]
        # rmsnorm's results are the same kernels on the same shards either way; the
        # linear's own gradients are Inductor's reductions when compiled.
        for name in ("y", "s", "dx", "residual_grad"):
            assert torch.equal(c[name], e[name]), name
        for name, g in c["weight_grads"].items():
            torch.testing.assert_close(g, e["weight_grads"][name], rtol=1e-5, atol=1e-6)


# --- a tiny Llama: FSDP2 + tensor and sequence parallelism ---

if os.environ.get("CI"):
    import transformers  # CI installs it: a missing package must fail, not skip.
else:
    try:
        import transformers
    except ImportError:
        transformers = None

VOCAB, BATCH, SEQ = 64, 2, 8


def tiny_llama(on):
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=N, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=64, rms_norm_eps=1e-5, attn_implementation="eager")
    torch.manual_seed(seed_of("tiny-llama"))
    model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():  # HF starts norm weights at 1, which would hide weight bugs
        for i, (name, p) in enumerate(model.named_parameters()):
            if "norm" in name:
                p.copy_(weight_for(N, torch.float32, "cpu", seed_of("llama", i)))
    rmsnorm.patch_hf(model)
    return model.to(on)


def llama_batch(on):
    g = torch.Generator().manual_seed(seed_of("llama-batch"))
    return torch.randint(0, VOCAB, (BATCH, SEQ), generator=g).to(on)


def on_ranks_llama():
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import parallelize_module

    # Imported here, not reached as an attribute of rmsnorm: a rank process that ran no test
    # importing the submodule before has not loaded it.
    from rmsnorm.integrations.dtensor import llama_tp_plan

    # Data parallel x tensor parallel; two ranks make the data-parallel dimension 1, which
    # still runs FSDP2's code on parameters that are DTensors of the tensor-parallel mesh.
    mesh = init_device_mesh(device().type, (1, RANKS), mesh_dim_names=("dp", "tp"))
    model = tiny_llama(device())
    parallelize_module(model, mesh["tp"], llama_tp_plan(model))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    with Seen() as seen:
        logits = model(input_ids=llama_batch(device())).logits
        logits.float().square().sum().backward()
    return to_cpu(dict(logits=logits, seen=(seen.forward, seen.backward),
                       grads={n: p.grad.full_tensor() for n, p in model.named_parameters()}))


@pytest.mark.skipif(transformers is None, reason="transformers is not installed")
def test_llama_with_fsdp2_and_sequence_parallel_norms_matches_one_process(world):
    model = tiny_llama(HERE)
    logits = model(input_ids=llama_batch(HERE)).logits
    logits.float().square().sum().backward()
    grads = to_cpu({n: p.grad for n, p in model.named_parameters()})
    norms = sum("norm" in n for n in grads)  # 2 per layer + the final one
    assert norms == 5
    for got in world.run(on_ranks_llama):
        # Every norm ran on the local half of the sequence, forward and backward.
        assert got["seen"] == ([(BATCH, SEQ // RANKS, N)] * norms,) * 2
        torch.testing.assert_close(got["logits"], logits.detach().cpu(), rtol=1e-5, atol=1e-5)
        assert got["grads"].keys() == grads.keys()
        for name, g in got["grads"].items():
            torch.testing.assert_close(g, grads[name], rtol=1e-4, atol=1e-5, msg=name)


# --- the cost for everyone else ---

def test_importing_rmsnorm_does_not_import_dtensor():
    code = ("import sys, rmsnorm; "
            "assert 'torch.distributed.tensor' not in sys.modules, 'imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
