"""The AOT compile's progress (rmsnorm.aot.progress): a line a few seconds apart, not one per
kernel, each with the count and an estimate of the time left; the last always. A fake clock
and fake work: nothing is compiled."""

import re

from rmsnorm.aot import progress
from rmsnorm.aot.progress import Progress


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _run(total, seconds_per_kernel, every=5.0):
    clock, lines = Clock(), []
    p = Progress(total, every=every, clock=clock, write=lines.append)
    for _ in range(total):
        clock.now += seconds_per_kernel
        p.step()
    return lines


def test_one_line_every_few_seconds_not_one_per_kernel():
    # 3668 kernels at 0.25 s each (two cores): 917 s, so a line every 5 s and the last.
    lines = _run(3668, 0.25)
    assert 180 <= len(lines) <= 185, len(lines)
    assert lines[-1] == "rmsnorm.aot: 3668/3668 kernels compiled in 15m17s"


def test_each_line_has_the_count_and_an_estimate_of_the_time_left():
    lines = _run(400, 0.5)
    # After 10 s, 20 of 400 done at 0.5 s each: 190 s left.
    assert lines[1] == "rmsnorm.aot: 20/400 kernels compiled (5%), 10s so far, about 3m10s left"
    for line in lines[:-1]:
        assert re.fullmatch(r"rmsnorm\.aot: \d+/400 kernels compiled \(\d+%\), \S+ so far, "
                            r"about \S+ left", line), line


def test_a_fast_build_prints_its_last_line_alone():
    assert _run(50, 0.01) == ["rmsnorm.aot: 50/50 kernels compiled in 0s"]


def test_a_slow_kernel_gets_a_line_as_soon_as_it_is_done():
    clock, lines = Clock(), []
    p = Progress(10, clock=clock, write=lines.append)
    clock.now += 30.0
    p.step()
    assert lines == ["rmsnorm.aot: 1/10 kernels compiled (10%), 30s so far, about 4m30s left"]


def test_durations_read_at_a_glance():
    assert [progress.duration(s) for s in (0, 59.4, 60, 185, 3599, 3600, 7325)] == \
        ["0s", "59s", "1m00s", "3m05s", "59m59s", "1h00m", "2h02m"]
