"""The AOT compiler (rmsnorm.aot) compiles the code Triton's JIT compiles for the Python path:
the same argument types, the same specializations, the same compiler options. Runs on the
CPU (compiling needs no GPU), in a child process: the test session may have Triton's
interpreter on, under which kernels cannot be compiled."""

import json
import os
import subprocess
import sys
import time

import pytest

from helpers import ROOT

QUANT_FLAGS = ["has_ub", "ss_col", "ss_row", "store_unq", "ue8m0"]
ROW_COUNTS = {"fwd_tile_kernel": ["H", "M", "rstd_rows"],
              "fwd_loop_kernel": ["H", "M", "rstd_rows"],
              # The quantized forward's run-time flags and scale strides, too: the AOT build
              # compiles one kernel for every value of them.
              "fwd_quant_tile_kernel": sorted(["H", "M", "rstd_rows", *QUANT_FLAGS]),
              "fwd_quant_loop_kernel": sorted(["H", "M", "rstd_rows", *QUANT_FLAGS]),
              "bwd_tile_kernel": ["H", "M"], "bwd_loop_kernel": ["H", "M"],
              "dw_reduce_kernel": ["P"]}

_PROBE = r"""
import json, re
from rmsnorm.aot import build as aot
from rmsnorm.kernels import backward, forward
from rmsnorm.launch import configs

facts = {"unspecialized": {}, "int_types": {}, "pdl": {}, "compiled": {}}
for k in (forward.fwd_tile_kernel, forward.fwd_loop_kernel, forward.fwd_quant_tile_kernel,
          forward.fwd_quant_loop_kernel, backward.bwd_tile_kernel, backward.bwd_loop_kernel,
          backward.dw_reduce_kernel):
    facts["unspecialized"][k.__name__] = sorted(p.name for p in k.params if p.do_not_specialize)
def row(op, eb, n):
    return configs.rule_index(op, n, eb)

specs = [aot.Spec("fwd", "bf16", True, True, variant=row("fwd", 2, 4096)),
         aot.Spec("add", "fp16", variant=len(configs.rules_for("add", 2)) - 1),
         aot.Spec("bwd", "fp32", True, has_dresidual=True, has_dw=True, variant=row("bwd", 4, 256)),
         aot.Spec("reduce", "bf16", variant=aot.reduce_blocks()[0].bit_length() - 1),
         aot.Spec("add", "bf16", True, variant=row("add", 2, 4096), quant=3, qformat="int8",
                  group=128)]
for spec in specs:
    kernel, types, consts, pointers, _, _, _ = aot._signature(spec, 90)
    op = "quant" if spec.quant else spec.op
    facts["int_types"][op] = sorted({t for n, t in types.items() if n not in consts
                                          and n not in pointers and n not in ("eps", "offset")})
    facts["pdl"][op] = [aot._signature(spec, a)[2]["PDL"] for a in (80, 89, 90, 100)]
for arch in (80, 90):
    for align in (aot.ALIGN_NONE, aot.ALIGN_VEC):
        ptx = aot.compile_one(aot.Spec("fwd", "fp32", True, True, variant=row("fwd", 4, 64),
                                       align=align), arch)["ptx"]
        facts["compiled"][f"{arch}/{align}"] = {
            "wait": "griddepcontrol.wait" in ptx,
            "launch": "griddepcontrol.launch_dependents" in ptx,
            "fma": bool(re.search(r"\bfma\.", ptx))}
print(json.dumps(facts))
"""


@pytest.fixture(scope="module")
def facts():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = str(ROOT)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kernel", sorted(ROW_COUNTS))
def test_row_counts_are_never_specialized(facts, kernel):
    # The JIT would compile a count of 1, or one divisible by 16, as a kernel of its own,
    # which the AOT build (one kernel for every count) does not have.
    assert facts["unspecialized"][kernel] == ROW_COUNTS[kernel]


@pytest.mark.parametrize("op", ["fwd", "add", "bwd", "reduce", "quant"])
def test_every_integer_argument_is_32_bit_as_the_jit_types_it(facts, op):
    assert facts["int_types"][op] == ["i32"]


@pytest.mark.parametrize("op", ["fwd", "add", "bwd", "reduce", "quant"])
def test_kernels_for_sm90_and_later_wait_on_the_prior_grid(facts, op):
    assert facts["pdl"][op] == [False, False, True, True]  # sm_80, 89, 90, 100


@pytest.mark.parametrize("arch,waits", [("80", False), ("90", True)])
@pytest.mark.parametrize("vectorised", [False, True])
def test_compiled_code_waits_from_sm90_and_fuses_fmas_only_when_vectorised(facts, arch, waits,
                                                                          vectorised):
    got = facts["compiled"][f"{arch}/{2 if vectorised else 0}"]
    assert got["wait"] == waits and got["launch"] == waits
    # rmsnorm.launch.configs.compile_options: unvectorised kernels round every product on its own,
    # so that all lanes holding a row's sum agree; vectorised ones keep their FMAs.
    assert got["fma"] == vectorised


def test_the_build_stamp_is_dated_to_when_the_build_began(tmp_path, monkeypatch):
    # A launch table edited while the kernels compile must leave the stamp older than it, so
    # that the build tool runs the step again.
    from rmsnorm.aot import build as aot
    table = tmp_path / "sm90.py"

    def build(*args):
        time.sleep(0.05)
        table.write_text("edited while compiling")

    monkeypatch.setattr(aot, "build", build)
    stamp = tmp_path / "aot.stamp"
    assert aot.main(["--out", str(tmp_path), "--archs", "90", "--stamp", str(stamp)]) == 0
    assert stamp.exists() and stamp.stat().st_mtime < table.stat().st_mtime


def test_each_kernels_pointer_parameters_lead_its_arguments_as_specs_lists_them():
    # The launcher passes its tensors in specs' order and the AOT build types them by it.
    from rmsnorm.kernels import backward, forward
    from rmsnorm.launch import specs

    for kernels, pointers in (
            ((forward.fwd_tile_kernel, forward.fwd_loop_kernel), specs.FORWARD_POINTERS),
            ((forward.fwd_quant_tile_kernel, forward.fwd_quant_loop_kernel),
             specs.QUANT_POINTERS),
            ((backward.bwd_tile_kernel, backward.bwd_loop_kernel), specs.BACKWARD_POINTERS),
            ((backward.dw_reduce_kernel,), specs.REDUCE_POINTERS)):
        for kernel in kernels:
            names = list(kernel.arg_names)
            assert names[:len(pointers)] == list(pointers), kernel
            # The next parameter is the first size: no pointer is left out of the list.
            assert names[len(pointers)] in ("M", "P"), kernel
    assert specs.FP32_POINTERS <= set(specs.QUANT_POINTERS + specs.BACKWARD_POINTERS)
