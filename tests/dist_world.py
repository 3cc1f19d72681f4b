"""Two worker processes in one torch.distributed process group, for tests/api/test_distributed.py.

The workers stay up for the whole test module (starting a process and importing torch costs
seconds on the CI machine); each test sends them a function of its own module and gets back
both ranks' results. The device comes from RMSNORM_DIST_DEVICE: "cpu" (gloo; the kernels run
in Triton's interpreter when TRITON_INTERPRET=1 is set, as tests/conftest.py does without a
GPU) or "cuda" (NCCL, one GPU per rank); by default "cuda" where there are two GPUs.
"""

import datetime
import os
import queue
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD_SIZE = 2
TIMEOUT_S = 300  # a rank that died mid-collective leaves the other waiting: give up then


def device_type():
    default = "cuda" if torch.cuda.device_count() >= WORLD_SIZE else "cpu"
    return os.environ.get("RMSNORM_DIST_DEVICE", default)


def why_not():
    """Why two ranks cannot run here, or None."""
    if not dist.is_available():
        return "this torch has no torch.distributed"
    if device_type() == "cuda":
        if torch.cuda.device_count() < WORLD_SIZE:
            return f"RMSNORM_DIST_DEVICE=cuda needs {WORLD_SIZE} GPUs"
        if not dist.is_nccl_available():
            return "this torch has no NCCL"
    elif not dist.is_gloo_available():
        return "this torch has no gloo backend"
    return None


class World:
    """Runs fn(*args) on both ranks: world.run(fn, *args) -> [rank 0's result, rank 1's]."""

    def __init__(self, init_file):
        self.init_file = init_file
        self.procs = []

    def run(self, fn, *args):
        if not self.procs:
            self._start()
        for q in self.tasks:
            q.put((fn, args))
        results, failures = [None] * WORLD_SIZE, []
        try:
            for _ in range(WORLD_SIZE):
                rank, ok, value = self.results.get(timeout=TIMEOUT_S)
                if ok:
                    results[rank] = value
                else:
                    failures.append(f"rank {rank}:\n{value}")
        except queue.Empty:
            failures.append(f"no answer within {TIMEOUT_S} s")
        if failures:
            self.close()  # the ranks may be out of step now: start afresh next time
            raise AssertionError("\n".join(failures))
        return results

    def _start(self):
        ctx = mp.get_context("spawn")
        if os.path.exists(self.init_file):
            os.remove(self.init_file)
        self.tasks = [ctx.Queue() for _ in range(WORLD_SIZE)]
        self.results = ctx.Queue()
        self.procs = [ctx.Process(target=_serve, daemon=True, args=(
            rank, self.init_file, device_type(), self.tasks[rank], self.results))
            for rank in range(WORLD_SIZE)]
        for p in self.procs:
            p.start()

    def close(self):
        for q, p in zip(self.tasks, self.procs):
            if p.is_alive():
                q.put(None)
        for p in self.procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
        self.procs = []


# --- inside a worker ---

_device = None


def device():
    """This rank's device."""
    return _device


def _serve(rank, init_file, device_type, tasks, results):
    global _device
    if device_type == "cuda":
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        torch.cuda.set_device(rank)
        _device = torch.device("cuda", rank)
    else:
        _device = torch.device("cpu")
    dist.init_process_group("nccl" if device_type == "cuda" else "gloo",
                            init_method=f"file://{init_file}", rank=rank,
                            world_size=WORLD_SIZE,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S))
    _poison_outputs()
    try:
        while (task := tasks.get()) is not None:
            fn, args = task
            try:
                results.put((rank, True, fn(*args)))
            except BaseException:  # noqa: B902 - everything goes back to the test
                results.put((rank, False, traceback.format_exc()))
    finally:
        dist.destroy_process_group()


def _poison_outputs():
    """As tests/conftest.py: every output rmsnorm allocates starts as NaN (torch's fill of
    uninitialized memory under deterministic mode)."""
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
