"""The AOT compile's progress line: count done of the total and an estimate of the time left,
at most one line every `every` seconds (the compile runs for up to half an hour on two cores,
thousands of kernels: a line per kernel would bury the log, none leaves the terminal silent)."""

import sys
import time

EVERY_S = 5.0


def duration(seconds):
    """'42s', '3m05s', '1h02m': short enough to read at a glance, exact enough for a plan."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Progress:
    """Call step() once per kernel compiled; the last step always prints its line."""

    def __init__(self, total, *, what="kernels compiled", every=EVERY_S,
                 clock=time.monotonic, write=None):
        self.total, self.what, self.every, self.clock = total, what, every, clock
        self.write = write or (lambda line: print(line, file=sys.stderr, flush=True))
        self.done = 0
        self.began = self.last = clock()

    def step(self, n=1):
        self.done += n
        now = self.clock()
        if self.done >= self.total or now - self.last >= self.every:
            self.last = now
            self.write(self.line(now - self.began))

    def line(self, elapsed):
        head = f"rmsnorm.aot: {self.done}/{self.total} {self.what}"
        if self.done >= self.total:
            return f"{head} in {duration(elapsed)}"
        percent = 100 * self.done // self.total
        # The rate so far: kernels differ in cost, so build() compiles them in a shuffled order.
        left = elapsed / self.done * (self.total - self.done) if self.done else None
        estimate = f", about {duration(left)} left" if left is not None else ""
        return f"{head} ({percent}%), {duration(elapsed)} so far{estimate}"
