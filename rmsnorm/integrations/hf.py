"""Swap the RMSNorm modules of Hugging Face transformers models for rmsnorm's.

The table below was read off transformers 5.24.0's modeling files. Two recipes occur:
- Llama, Mistral, Qwen2, Qwen3: `weight * x_normed.to(input_dtype)`, eps in
  `variance_epsilon`: our "llama" mode with offset 0.
- Gemma, Gemma2, Gemma3: `(x_normed * (1.0 + weight.float())).type_as(x)`, all in fp32, eps
  in `eps`: our "gemma" mode with offset 1.

Not patched: `Gemma3nRMSNorm` and `Gemma4RMSNorm` take `with_scale`, may have no weight, and
scale by `weight`, not `1 + weight`, with `pow(-0.5)` instead of rsqrt. They are different
classes, so class-name matching leaves them alone; supporting them means a new table row after
checking their forward, not a reuse of the Gemma3 row. The installed Gemma3RMSNorm has no
`with_scale`.
"""

import contextlib
import numbers
import warnings

from torch import nn

from rmsnorm.pytorch.modules import RMSNorm

# HF class name -> (attribute holding eps, offset, casting_mode).
_LLAMA = ("variance_epsilon", 0.0, "llama")
_GEMMA = ("eps", 1.0, "gemma")
SUPPORTED = {
    "LlamaRMSNorm": _LLAMA,
    "MistralRMSNorm": _LLAMA,
    "Qwen2RMSNorm": _LLAMA,
    "Qwen3RMSNorm": _LLAMA,
    "GemmaRMSNorm": _GEMMA,
    "Gemma2RMSNorm": _GEMMA,
    "Gemma3RMSNorm": _GEMMA,
}


def patch_hf(model):
    """Replace, in place, every supported HF RMSNorm inside `model` with rmsnorm.RMSNorm.

    The new modules hold the very same weight Parameter (optimizers, tied references and the
    state dict are unaffected) and the same eps. Returns [(qualified_name, original_module)],
    empty when there is nothing to patch; give it to `unpatch` to undo.
    """
    _check_model(model)
    # Collect first: replacing children while named_modules() walks them is unsafe. Duplicates
    # are kept so a norm shared by two parents is replaced at both places, by one new module.
    # The root (name "") cannot be replaced in place.
    found = []
    for name, module in model.named_modules(remove_duplicate=False):
        if not name or not is_hf_norm(module):
            continue
        reason = why_not_patched(module)
        if reason:
            warnings.warn(f"rmsnorm.patch_hf: left {name} ({type(module).__name__}) as is: "
                          f"{reason}", stacklevel=2)
        else:
            found.append((name, module))
    new_for = {}
    replaced = []
    for name, original in found:
        if id(original) not in new_for:
            new_for[id(original)] = _ours_for(original)
        _set_submodule(model, name, new_for[id(original)])
        replaced.append((name, original))
    return replaced


def unpatch(model, replaced):
    """Put back the originals that `patch_hf(model)` returned."""
    _check_model(model)
    for name, original in replaced:
        current = model.get_submodule(name)
        # If someone reassigned the weight while patched, the original must see the new one.
        if isinstance(current, RMSNorm) and current.weight is not original.weight:
            original.weight = current.weight
        _set_submodule(model, name, original)


@contextlib.contextmanager
def patched(model):
    """`with patched(model) as replaced:` runs the block with rmsnorm's norms in `model`."""
    replaced = patch_hf(model)
    try:
        yield replaced
    finally:
        unpatch(model, replaced)


def _check_model(model):
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")


def is_hf_norm(module):
    """Whether `module` is one of transformers' RMSNorm classes in SUPPORTED (what patch_hf
    and rmsnorm-compare look for)."""
    cls = type(module)
    # The module check keeps our own GemmaRMSNorm (same class name) and remote-code copies,
    # whose forward may differ, out.
    return cls.__name__ in SUPPORTED and cls.__module__.startswith("transformers.models.")


def why_not_patched(module):
    """For an `is_hf_norm` module: why patch_hf leaves it as is (it is not the class version
    the table describes, or swapping it would drop state or hooks), or None when it swaps it."""
    eps_attr = SUPPORTED[type(module).__name__][0]
    weight = getattr(module, "weight", None)
    if not isinstance(weight, nn.Parameter) or weight.dim() != 1:
        return "no 1-D weight Parameter"
    eps = getattr(module, eps_attr, None)
    if not isinstance(eps, numbers.Real) or isinstance(eps, bool):
        return f"no numeric `{eps_attr}`"
    if len(list(module.parameters())) != 1 or list(module.buffers()) \
            or list(module.children()):
        return "state beyond the weight"
    # accelerate's offloading hooks and kernels' kernelize() replace forward on the instance;
    # swapping the module would silently drop them, as it would drop registered hooks.
    if "forward" in vars(module):
        return "its forward was replaced on the instance"
    if module._forward_hooks or module._forward_pre_hooks or module._backward_hooks \
            or module._backward_pre_hooks:
        return "it has hooks"
    return None


def _ours_for(original):
    eps_attr, offset, casting_mode = SUPPORTED[type(original).__name__]
    weight = original.weight
    # Built without a weight so no throwaway tensor is allocated, then given the original one.
    ours = RMSNorm(weight.shape[0], getattr(original, eps_attr), offset=offset,
                   casting_mode=casting_mode, elementwise_affine=False)
    ours.weight = weight
    ours.train(original.training)
    return ours


def _set_submodule(model, name, module):
    parent_name, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent_name), child, module)
