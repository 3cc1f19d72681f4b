"""rmsnorm.aot.sample: the AOT compile's sample that CI runs on every other Triton of the range
(scripts/triton_check.sh) holds every kind of specialization, each at its narrowest and
widest launch table row, and refuses to run under the interpreter (which compiles nothing)."""

import os
import subprocess
import sys

from rmsnorm.aot import build as aot, sample

from helpers import ROOT


def test_every_kind_of_specialization_is_in_the_sample_at_its_first_and_last_row():
    picked = set(sample.sample(90))
    groups = {}
    for spec in aot.specs(90):
        groups.setdefault(sample._group(spec), []).append(spec.variant)
    for group, rows in groups.items():
        fields = dict(group)
        for variant in (min(rows), max(rows)):
            assert aot.Spec(**fields, variant=variant) in picked, (fields, variant)
    assert len(picked) <= 2 * len(groups)
    assert {aot.family(s) for s in picked} == {"Forward", "Backward", "Reduce", "QuantForward"}


def test_the_sample_is_a_fraction_of_the_full_build():
    assert len(sample.sample(90)) * 5 < len(aot.specs(90))


def test_under_the_interpreter_it_says_it_cannot_compile():
    env = dict(os.environ, TRITON_INTERPRET="1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-m", "rmsnorm.aot.sample"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "TRITON_INTERPRET is set" in done.stderr
