"""rmsnorm under DTensor: sharding rules for the rmsnorm ops (which DTensor then runs on the
local shards), and a SequenceParallel style that also takes the fused add's residual.

Each row of x is normalized on its own, so the ops run on local shards unchanged as long as
no row is split: x (and residual, dy, dresidual, rstd alike) may be Replicate or Shard(d) on
any dimension d but the last; the weight is Replicate (DTensor all-gathers a sharded one).
Outputs keep x's placement; rstd (shape x.shape[:-1]) gets the same Shard(d); the weight
gradient of a sharded x is a Partial sum over ranks, which DTensor (or FSDP2) reduces when it
is needed. Inputs in other placements (Partial, say) are redistributed by DTensor to the
cheapest of these.

A Shard on the last dimension is refused with an error: the norm would need every rank's sum
of squares, i.e. a gather or an all-reduce hidden inside the op. That choice, and its cost,
stays visible to the caller (`x.redistribute(...)`).

Importing this module registers the rules; rmsnorm imports it on the first DTensor it sees,
or at import when torch.distributed.tensor is already loaded. rmsnorm::fwd_into (out=) and
rmsnorm::add_fwd_inplace have no rule: for a DTensor the public functions write out= and
inplace=True with copy_ instead, and a direct call fails in DTensor saying the op has no
sharding strategy.
"""

import torch
from torch import nn
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_module
from torch.distributed.tensor.experimental import register_sharding
from torch.distributed.tensor.parallel import ParallelStyle


def is_dtensor(t):
    return isinstance(t, DTensor)


def check_rows_whole(name, t):
    """The error for a split last dimension. `t`: a DTensor or DTensor's spec of one."""
    last = t.ndim - 1
    for mesh_dim, p in enumerate(t.placements):
        if p.is_shard() and p.dim in (last, -1):
            raise ValueError(
                f"rmsnorm: {name} is sharded on its last dimension ({p} on mesh dimension "
                f"{mesh_dim}), the one the norm reduces over; each rank would need the other "
                f"ranks' sums of squares. Redistribute it first, e.g. "
                f"{name}.redistribute(placements=[Replicate()]), or shard a leading "
                f"dimension (sequence parallelism shards dimension 1).")


# The rules, for one mesh dimension (register_sharding expands them to the whole mesh): each
# returns (output placements, input placements) pairs, one per placement of x, with None for
# non-tensor arguments and absent optional tensors.

def _row_placements(x):
    return [Replicate()] + [Shard(d) for d in range(x.ndim - 1)]


def _replicated(weight):
    return None if weight is None else Replicate()


def _fwd_rule(x, weight, eps, offset, casting_mode, return_rstd):
    check_rows_whole("x", x)
    w = _replicated(weight)
    # An unsaved rstd is an empty (0,) tensor: nothing to shard.
    return [([p, p if return_rstd else Replicate()], [p, w, None, None, None, None])
            for p in _row_placements(x)]


def _add_fwd_rule(x, residual, weight, eps, offset, casting_mode, normalized_sum, return_rstd):
    check_rows_whole("x", x)
    check_rows_whole("residual", residual)
    w = _replicated(weight)
    return [([p, p, p if return_rstd else Replicate()],
             [p, p, w, None, None, None, None, None])
            for p in _row_placements(x)]


def _bwd_rule(dy, x, weight, rstd, dresidual, offset, casting_mode, need_dw):
    for name, t in (("dy", dy), ("x", x), ("dresidual", dresidual)):
        if t is not None:
            check_rows_whole(name, t)
    w = _replicated(weight)

    def dw(p):
        # Each rank holds some of the rows, so its dw is a partial sum; an unneeded dw is an
        # empty (0,) tensor.
        sharded = isinstance(p, Shard) and weight is not None and need_dw
        return Partial() if sharded else Replicate()

    return [([p, dw(p)], [p, p, w, p, None if dresidual is None else p, None, None, None])
            for p in _row_placements(x)]


def _register():
    from torch.distributed.tensor._op_schema import RuntimeSchemaInfo

    ops = torch.ops.rmsnorm
    # (op, rule, index of its first non-tensor argument)
    rules = ((ops.fwd.default, _fwd_rule, 2), (ops.add_fwd.default, _add_fwd_rule, 3),
             (ops.bwd.default, _bwd_rule, 5))
    propagator = DTensor._op_dispatcher.sharding_propagator
    for op, rule, first_scalar in rules:
        register_sharding(op)(rule)
        # register_sharding keys DTensor's cache of sharding decisions on the tensors' specs
        # and int arguments only; ours are bools, floats and strs, and return_rstd / need_dw change
        # the outputs' shapes. Key on every non-tensor argument instead.
        propagator.op_to_schema_info[op] = RuntimeSchemaInfo(first_scalar, needs_pytree=True)


class SequenceParallel(ParallelStyle):
    """Sequence parallelism for a norm module, as torch.distributed.tensor.parallel's
    SequenceParallel (replicated parameters, inputs sharded on `sequence_dim`), but every
    positional tensor argument is sharded, not only the first: rmsnorm's `norm(x, residual)`
    keeps its residual (torch's style drops it) and returns (y, residual_out) as DTensors, or local
    tensors with use_local_output=True. Plain tensors are taken as the local shards."""

    def __init__(self, *, sequence_dim=1, use_local_output=False):
        super().__init__()
        self.placements = (Shard(sequence_dim),)
        self.use_local_output = use_local_output

    def _apply(self, module, device_mesh):
        return distribute_module(module, device_mesh, _replicate_parameters,
                                 self._shard_inputs, self._local_outputs)

    def _shard_inputs(self, module, inputs, mesh):
        return tuple(self._sharded(t, mesh) if isinstance(t, torch.Tensor) else t
                     for t in inputs)

    def _sharded(self, t, mesh):
        if not isinstance(t, DTensor):
            return DTensor.from_local(t, mesh, self.placements, run_check=False)
        if tuple(t.placements) != self.placements:
            return t.redistribute(mesh, self.placements)
        return t

    def _local_outputs(self, module, outputs, mesh):
        if not self.use_local_output:
            return outputs
        if isinstance(outputs, tuple):
            return tuple(o.to_local() for o in outputs)
        return outputs.to_local()


def llama_tp_plan(model):
    """A parallelize_module plan for a Hugging Face Llama-family model (model.model.layers,
    lm_head): Megatron-style tensor parallelism with sequence-parallel norms, torchtitan's
    layout. The residual stream stays a sequence-sharded DTensor between blocks; attention and
    the MLP gather the sequence and shard heads / features; every norm runs on its sequence
    shard (torch's SequenceParallel: HF's norms take one argument)."""
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel)
    from torch.distributed.tensor.parallel import SequenceParallel as TorchSequenceParallel

    seq, rep = Shard(1), Replicate()
    plan = {"model.embed_tokens": RowwiseParallel(input_layouts=rep, output_layouts=seq,
                                                  use_local_output=False),
            "model.norm": TorchSequenceParallel(),
            "lm_head": ColwiseParallel(input_layouts=seq, output_layouts=rep)}
    for i in range(len(model.model.layers)):
        layer = f"model.layers.{i}."
        plan.update({
            layer + "input_layernorm": TorchSequenceParallel(),
            layer + "post_attention_layernorm": TorchSequenceParallel(),
            layer + "self_attn": PrepareModuleInput(
                input_kwarg_layouts={"hidden_states": seq},
                desired_input_kwarg_layouts={"hidden_states": rep}),
            layer + "mlp": PrepareModuleInput(input_layouts=(seq,), desired_input_layouts=(rep,)),
            **{layer + f"self_attn.{p}_proj": ColwiseParallel() for p in "qkv"},
            **{layer + f"mlp.{p}_proj": ColwiseParallel() for p in ("gate", "up")},
            layer + "self_attn.o_proj": RowwiseParallel(output_layouts=seq,
                                                        use_local_output=False),
            layer + "mlp.down_proj": RowwiseParallel(output_layouts=seq, use_local_output=False),
        })
    return plan


def _replicate_parameters(name, module, mesh):
    # As torch's SequenceParallel: every rank holds the same initial values (norm weights
    # start at ones or zeros), so each local tensor is the whole parameter; no broadcast.
    for pname, p in list(module.named_parameters(recurse=False)):
        if not isinstance(p, DTensor):
            module.register_parameter(pname, nn.Parameter(
                DTensor.from_local(p, mesh, [Replicate()], run_check=False),
                requires_grad=p.requires_grad))


_register()
