"""The C++ runtime's view of the AOT kernels is generated (rmsnorm.aot.abi): the committed
header is what the generator writes, and its key layout, op and dtype codes, parameter slots
and alignment classes are the Python side's, as the AOT build compiles the kernels."""

import inspect
import re

import pytest
import triton.language as tl

from rmsnorm.aot import abi as aot_abi, build as aot, emit as aot_emit
from rmsnorm.kernels import backward, forward, quantize
from rmsnorm.launch import configs, quant_contract

HEADER = aot_abi.HEADER.read_text()


def _constants():
    return {name: int(value) for name, value in re.findall(r"\b(k\w+) = (\d+)\b", HEADER)}


def _slots(family):
    body = re.search(rf"enum class {family}Arg : int \{{(.*?)\}};", HEADER, re.S).group(1)
    return [name for name, _ in re.findall(r"(k\w+) = (\d+),", body)]


def _arg_infos(family):
    body = re.search(rf"ArgInfo k{family}Args\[k{family}ArgCount\] = \{{(.*?)\n\}};", HEADER,
                     re.S).group(1)
    return re.findall(r"\{ArgKind::k(\w+), (k\w+), \"(\w+)\"\}", body)


def test_the_committed_header_is_what_the_generator_writes():
    assert HEADER == aot_abi.header(), "run python -m rmsnorm.aot.abi and commit the header"
    assert aot_abi.main(["--check"]) == 0


def test_keys_pack_as_the_headers_shifts_say_and_name_one_kernel_each():
    c = _constants()
    shifts = {field: c[aot_abi._cpp_name(field) + "Shift"] for field, _ in aot.KEY_FIELDS}
    specs = aot.specs(90)
    for spec in specs:
        fields = dict(op=aot.OPS.index(spec.op), dtype=aot.DTYPES.index(spec.dtype),
                      has_w=spec.has_w, llama=spec.llama, has_dresidual=spec.has_dresidual,
                      has_dw=spec.has_dw, align=spec.align, variant=spec.variant,
                      quant=spec.quant,
                      qformat=aot.QFORMATS.index(spec.qformat) if spec.quant else 0,
                      group=aot.GROUP_SIZES.index(spec.group), fp32_sum=spec.fp32_sum,
                      vllm_fused=spec.vllm_fused)
        assert spec.key() == sum(int(v) << shifts[f] for f, v in fields.items()), spec
    assert len({s.key() for s in specs}) == len(specs)


def test_a_field_too_wide_for_its_bits_is_refused():
    with pytest.raises(ValueError, match="variant"):
        aot.Spec("fwd", "bf16", variant=1 << dict(aot.KEY_FIELDS)["variant"]).key()


def test_the_key_has_room_for_every_table_row_and_uses_32_bits():
    assert sum(bits for _, bits in aot.KEY_FIELDS) == 32  # KernelKey::packed() is a uint32_t
    variant_bits = dict(aot.KEY_FIELDS)["variant"]
    assert aot_emit.MAX_WIDTH_RULES <= 1 << variant_bits


def test_op_and_dtype_codes_are_the_python_orders():
    c = _constants()
    assert [c[aot_abi.CPP_OPS[op]] for op in aot.OPS] == list(range(len(aot.OPS)))
    assert [c[aot_abi.CPP_DTYPES[d]] for d in aot.DTYPES] == list(range(len(aot.DTYPES)))
    # The launch table's ops take the first codes: WidthRules is indexed by them.
    assert aot.OPS[:len(configs.OPS)] == configs.OPS
    assert c["kTableOpCount"] == len(configs.OPS)
    assert c["kMaxWidthRules"] == aot_emit.MAX_WIDTH_RULES


@pytest.mark.parametrize("family, kernels", [
    ("Forward", (forward.fwd_tile_kernel, forward.fwd_loop_kernel)),
    ("Backward", (backward.bwd_tile_kernel, backward.bwd_loop_kernel)),
    ("Reduce", (backward.dw_reduce_kernel,)),
    ("QuantForward", (forward.fwd_quant_tile_kernel, forward.fwd_quant_loop_kernel)),
])
def test_slots_are_the_kernels_arguments_without_constexprs_then_tritons_hidden_ones(
        family, kernels):
    for kernel in kernels:
        # From the Python function itself (under the interpreter a kernel is not a JITFunction).
        params = inspect.signature(kernel.fn).parameters.values()
        args = [p.name for p in params if p.annotation is not tl.constexpr] + list(aot_abi.HIDDEN)
        assert _slots(family) == [aot_abi._cpp_name(a) for a in args]
        assert [name for _, _, name in _arg_infos(family)] == args


def test_each_alignment_class_assumes_what_the_aot_build_specialises_on():
    # The runtime picks a kernel by the class its arguments allow; the class must name the
    # very arguments that kernel was compiled to take as divisible by 16.
    classes = {"kAlignNone": aot.ALIGN_NONE, "kAlignPointers": aot.ALIGN_PTR,
               "kAlignVec": aot.ALIGN_VEC}
    seen = set()
    for spec in aot.specs(90):
        kernel, source, _ = aot._compile_inputs(spec, 90)
        divisible = {kernel.arg_names[i] for (i,), _ in source["attrs"].items()}
        infos = _arg_infos(aot.family(spec))
        want = {name for _, cls, name in infos
                if cls != "kAlignNone" and classes[cls] <= spec.align}
        assert divisible == want, spec
        seen.add((spec.op, bool(spec.quant), spec.align))
    # The quantized forward (fwd and add) in its one class, the others in all three.
    assert len(seen) == 4 * 3 + 2


def test_each_argument_has_the_kind_the_aot_signature_gives_it():
    kinds = {"Pointer": "*", "Int32": "i32", "Float32": "fp32"}
    for spec in aot.specs(90)[::97]:
        _, source, _ = aot._compile_inputs(spec, 90)
        for kind, _, name in _arg_infos(aot.family(spec)):
            if name in aot_abi.HIDDEN:
                continue
            assert source["signature"][name].startswith(kinds[kind]), (spec, name)


def test_both_casting_modes_are_compiled_exactly_where_the_header_says():
    flags = re.search(r"kBothCastingModes\[kDtypeCount\] = \{(.*?)\};", HEADER).group(1)
    both = dict(zip(aot.DTYPES, (f.strip() == "true" for f in flags.split(","))))
    for dtype in aot.DTYPES:
        specs = [s for s in aot.specs(90) if s.dtype == dtype and s.op != "reduce"]
        modes = {s.llama for s in specs if s.has_w}
        assert (modes == {True, False}) == both[dtype]
        assert {s.llama for s in specs if not s.has_w} == {True}


PTX = """
.visible .entry k(
    .param .u64 .ptr .global .align 1 k_param_0,
    .param .u32 k_param_1,
    .param .f32 k_param_2,
    .param .u64 .ptr .global .align 1 k_param_3
)
"""


def test_the_ptx_parameter_list_is_read_kind_by_kind():
    declarations = aot_abi.ptx_parameters(PTX, "k")
    assert declarations == [".u64 .ptr .global .align 1", ".u32", ".f32",
                            ".u64 .ptr .global .align 1"]
    kinds = [aot_abi.ptx_kind(d) for d in declarations]
    assert kinds == ["pointer", "int32", "float32", "pointer"]
    assert aot_abi.ptx_kind(".u16") is None


def test_a_kernel_whose_ptx_takes_other_parameters_fails_the_build():
    spec = next(s for s in aot.specs(90) if s.op == "reduce")
    other = {"name": "k", "parameters": aot_abi.ptx_parameters(PTX, "k")}
    with pytest.raises(RuntimeError, match="other parameters"):
        aot_abi.check_parameters(90, [spec], [other])
    kinds = [k for _, k, _ in aot_abi.family_parameters("Reduce", 90)]
    decl = {"pointer": ".u64 .ptr .global .align 1", "int32": ".u32", "float32": ".f32"}
    ptx = ".visible .entry k(\n" + ",\n".join(
        f"\t.param {decl[k]} k_param_{i}" for i, k in enumerate(kinds)) + "\n)\n"
    own = {"name": "k", "parameters": aot_abi.ptx_parameters(ptx, "k")}
    aot_abi.check_parameters(90, [spec], [own])  # the family's own list passes


def test_the_split_forwards_threshold_is_the_launch_tables():
    divisors = re.search(r"kSplitForwardSmDivisor\[2\] = \{(\d+), (\d+)\};", HEADER).groups()
    assert [int(d) for d in divisors] == [configs.SPLIT_FORWARD_SM_DIVISOR[op]
                                          for op in ("fwd", "add")]


def test_the_quantized_forwards_codes_are_the_kernels_and_the_launchers():
    c = _constants()
    modes = [quantize.NONE, quantize.STATIC, quantize.TOKEN, quantize.GROUP]
    assert [c[f"kQuant{m.capitalize()}"] for m in aot.QUANT_MODES] == modes
    assert [c[f"kQFormat{f.capitalize()}"] for f in aot.QFORMATS] == [0, 1, 2]
    groups = re.search(r"kGroupSizes\[kGroupSizeCount\] = \{(.*?)\};", HEADER).group(1)
    assert [int(g) for g in groups.split(",")] == list(aot.GROUP_SIZES)
    assert aot.GROUP_SIZES == (0, *quant_contract.GROUP_SIZES)


def test_the_quantized_forward_is_compiled_exactly_where_the_header_says():
    def flags(name):
        body = re.search(rf"{name}\[\w+\] = \{{(.*?)\}};", HEADER).group(1)
        return [f.strip() == "true" for f in body.split(",")]

    dtypes = dict(zip(aot.DTYPES, flags("kQuantDtypes")))
    formats = dict(zip(aot.QFORMATS, flags("kQuantFormats")))
    specs = [s for s in aot.specs(90) if s.quant and not s.vllm_fused]
    assert {s.dtype for s in specs} == {d for d, on in dtypes.items() if on}
    assert {s.qformat for s in specs} == {f for f, on in formats.items() if on}
    assert {(s.has_w, s.align, s.has_dresidual, s.has_dw) for s in specs} == {
        (True, aot.ALIGN_VEC, False, False)}
    assert re.search(r"kQuantAlign = kAlignVec;", HEADER)
    # Every table row has every mode, format and casting mode, but the per-group kernels of
    # groups its tile is not a multiple of.
    have = {(s.op, s.dtype, s.variant, s.llama, s.qformat, s.quant, s.group) for s in specs}
    for dtype in aot.QUANT_DTYPES:
        for op in ("fwd", "add"):
            for variant, rule in enumerate(aot.table_rows(op, dtype, 90)):
                for llama in (True, False):
                    for qformat in aot.QUANT_FORMATS:
                        for quant, group in ((1, 0), (2, 0), (3, 64), (3, 128)):
                            want = group == 0 or rule.block_n % group == 0
                            key = (op, dtype, variant, llama, qformat, quant, group)
                            assert (key in have) == want, key


def test_the_vendor_recipes_are_compiled_where_the_presets_take_them_and_nowhere_else():
    """normalized_sum="fp32" for the fused add (f16, bf16, with a weight, both casting modes,
    every table row) and quantizer="vllm_fused" for the per-token and per-group forward
    (llama; with a residual, the fp32 sum too), vectorised; nothing else is compiled with
    them (docs/USAGE.md, "Recipes", says the rest takes the Python launcher)."""
    specs = aot.specs(90)
    fp32 = {(s.dtype, s.llama, s.variant) for s in specs
            if s.fp32_sum and not s.quant}
    assert fp32 == {(d, llama, v) for d in aot.RECIPE_DTYPES for llama in (True, False)
                    for v in range(len(aot.table_rows("add", d, 90)))}
    fused = [s for s in specs if s.vllm_fused]
    assert {s.quant for s in fused} == {2, 3}
    assert all(s.llama and s.fp32_sum == (s.op == "add") and s.dtype in aot.RECIPE_DTYPES and
               s.align == aot.RECIPE_ALIGN for s in fused)
    plain = {(s.op, s.dtype, s.variant, s.qformat, s.quant, s.group) for s in specs
             if s.quant in (2, 3) and s.llama and not s.vllm_fused}
    assert {(s.op, s.dtype, s.variant, s.qformat, s.quant, s.group) for s in fused} == plain
    assert not any(s.fp32_sum and (s.op != "add" or s.align != aot.RECIPE_ALIGN or
                                   not s.has_w) for s in specs)
