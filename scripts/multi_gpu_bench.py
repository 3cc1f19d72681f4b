"""Training throughput of a small Llama across GPUs: rmsnorm's RMSNorm against HF's norm.

One configuration per launch, on every rank of a torchrun job:

    torchrun --standalone --nproc_per_node=2 scripts/multi_gpu_bench.py --mode sp --norm rmsnorm \\
        --json out.jsonl
    python scripts/multi_gpu_bench.py --table out.jsonl     # the table of all lines so far

--mode sp: tensor parallelism with sequence-parallel norms over all ranks (torchtitan's
layout: the residual stream and the norms on sequence shards), FSDP2 over a data-parallel
mesh dimension of size 1. --mode fsdp: FSDP2 alone, data parallel over all ranks. --norm hf:
transformers' LlamaRMSNorm, which under sequence parallelism runs as DTensor's eager ops;
--norm rmsnorm: the same model with its norms swapped by rmsnorm.patch_hf.

The model is transformers' LlamaForCausalLM built from a config (random weights), or, where
transformers is not installed, a Llama-shaped model defined here (the same module names and
layers: norms, attention through scaled_dot_product_attention, SwiGLU MLP; no rotary
embedding) whose "hf" norm is HF's LlamaRMSNorm recipe in plain PyTorch. A step is forward,
cross-entropy loss and backward (no optimizer); steps are timed after warm-up, on rank 0,
between barriers. tokens/s counts every rank's tokens once (sequence-parallel ranks share
theirs).
"""

import argparse
import importlib.util
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=("sp", "fsdp"), default="sp")
    p.add_argument("--norm", choices=("hf", "rmsnorm"), default="rmsnorm")
    p.add_argument("--model", choices=("auto", "hf", "local"), default="auto",
                   help="hf: transformers' Llama; local: the one defined here; auto: hf if "
                        "transformers is installed")
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--intermediate", type=int, default=5632)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--batch", type=int, default=1, help="per data-parallel rank")
    p.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cpu: gloo, for a smoke test with tiny sizes")
    p.add_argument("--json", help="append the result as one JSON line to this file")
    p.add_argument("--table", metavar="JSONL", help="print the table of a results file; no run")
    return p.parse_args()


class EagerLlamaRMSNorm(nn.Module):
    """HF LlamaRMSNorm's recipe (the baseline when transformers is absent)."""

    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        dtype = hidden_states.dtype
        h = hidden_states.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * h.to(dtype)


class Attention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.head_dim = hidden // heads
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (
            nn.Linear(hidden, hidden, bias=False) for _ in range(4))

    def forward(self, hidden_states):
        b, t, _ = hidden_states.shape
        # Local heads under tensor parallelism: -1, not the configured count.
        q, k, v = (proj(hidden_states).view(b, t, -1, self.head_dim).transpose(1, 2)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, a, norm):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = norm(a.hidden), norm(a.hidden)
        self.self_attn = Attention(a.hidden, a.heads)
        self.mlp = MLP(a.hidden, a.intermediate)

    def forward(self, h):
        h = h + self.self_attn(hidden_states=self.input_layernorm(h))
        return h + self.mlp(self.post_attention_layernorm(h))


class LocalLlama(nn.Module):
    """Llama-shaped, with HF's module names (model.layers.i.input_layernorm, ..., lm_head)."""

    def __init__(self, a, norm):
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(a.vocab, a.hidden)
        self.model.layers = nn.ModuleList(Layer(a, norm) for _ in range(a.layers))
        self.model.norm = norm(a.hidden)
        self.lm_head = nn.Linear(a.hidden, a.vocab, bias=False)

    def forward(self, input_ids):
        h = self.model.embed_tokens(input_ids)
        for layer in self.model.layers:
            h = layer(h)
        return self.lm_head(self.model.norm(h))


def build(a, device, dtype):
    """(model, description); norms as --norm asks."""
    import rmsnorm

    use_hf = a.model == "hf"
    if a.model == "auto":
        use_hf = importlib.util.find_spec("transformers") is not None
    torch.manual_seed(0)  # every rank builds the same weights
    if use_hf:
        import transformers

        config = transformers.LlamaConfig(
            vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.intermediate,
            num_hidden_layers=a.layers, num_attention_heads=a.heads,
            num_key_value_heads=a.heads, max_position_embeddings=a.seq,
            attn_implementation="sdpa")
        model = transformers.LlamaForCausalLM(config)
        if a.norm == "rmsnorm":
            assert rmsnorm.patch_hf(model), "patch_hf replaced nothing"
        what = f"transformers {transformers.__version__} LlamaForCausalLM"
    else:
        norm = rmsnorm.RMSNorm if a.norm == "rmsnorm" else EagerLlamaRMSNorm
        model = LocalLlama(a, norm)
        what = "local Llama-shaped model (transformers absent)"
    return model.to(device=device, dtype=dtype), what


def run(a):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import parallelize_module

    cuda = a.device == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    dp, tp = (1, world) if a.mode == "sp" else (world, 1)
    mesh = init_device_mesh(a.device, (dp, tp), mesh_dim_names=("dp", "tp"))

    model, what = build(a, device, dtype)
    if tp > 1:
        # torch's styles only: fine for HF's norm
        from rmsnorm.integrations.dtensor import llama_tp_plan

        parallelize_module(model, mesh["tp"], llama_tp_plan(model))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])

    g = torch.Generator().manual_seed(1 + mesh["dp"].get_local_rank())
    ids, labels = torch.randint(0, a.vocab, (2, a.batch, a.seq), generator=g).to(device)
    hf = not isinstance(model, LocalLlama)

    def step():
        model.zero_grad(set_to_none=True)
        logits = model(input_ids=ids).logits if hf else model(ids)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
        loss.backward()
        return loss

    def sync():
        if cuda:
            torch.cuda.synchronize()
        dist.barrier()

    # The first loss: the same weights and data give (nearly) the same value for both norms.
    first_loss = step().item()
    for _ in range(a.warmup - 1):
        step()
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    sync()
    seconds = (time.perf_counter() - t0) / a.steps
    result = dict(mode=a.mode, norm=a.norm, model=what, ranks=world, dp=dp, tp=tp,
                  hidden=a.hidden, layers=a.layers, seq=a.seq, batch=a.batch, dtype=a.dtype,
                  device=torch.cuda.get_device_name() if cuda else "cpu",
                  torch=torch.__version__, first_loss=first_loss, ms_per_step=1e3 * seconds,
                  tokens_per_s=dp * a.batch * a.seq / seconds,
                  peak_gib=torch.cuda.max_memory_allocated() / 2 ** 30 if cuda else None)
    if rank == 0:
        print(json.dumps(result), flush=True)
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps(result) + "\n")
    dist.destroy_process_group()


def table(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    base = {(r["mode"], r["model"]): r["tokens_per_s"] for r in rows if r["norm"] == "hf"}
    print("| mode | ranks (dp x tp) | norm | tokens/s | ms/step | peak GiB | first loss | vs hf |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        hf = base.get((r["mode"], r["model"]))
        vs = f"{r['tokens_per_s'] / hf:.3f}x" if hf else "-"
        peak = "-" if r["peak_gib"] is None else f"{r['peak_gib']:.1f}"
        print(f"| {r['mode']} | {r['dp']} x {r['tp']} | {r['norm']} | {r['tokens_per_s']:,.0f} "
              f"| {r['ms_per_step']:.1f} | {peak} | {r['first_loss']:.4f} | {vs} |")
    if rows:
        r = rows[0]
        print(f"\n{r['model']}; hidden {r['hidden']}, {r['layers']} layers, seq {r['seq']}, "
              f"batch {r['batch']} per dp rank, {r['dtype']}; {r['device']}, torch {r['torch']}")


if __name__ == "__main__":
    args = parse()
    if args.table:
        table(args.table)
        sys.exit(0)
    run(args)
