"""Programmatic dependent launch (Hopper and later): the kernels' first step.

A kernel launched with the launch attribute may start while the grid before it in the stream
is still running; `griddepcontrol.wait` then blocks until that grid has finished and its
writes are visible. Every kernel waits before its first memory access (its first stores, the
looped backward's zeroed dw partials, can overwrite what the previous grid reads) and then
lets the next grid launch: all its own programs are resident by then, so the next grid only
takes what is left. Without the attribute both instructions do nothing. PTX has them from
sm_90 on: PDL is False for older targets and for the interpreter.
"""

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait


@triton.jit
def wait_for_prior_grid(PDL: tl.constexpr):
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
