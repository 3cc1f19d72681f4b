"""Launch tables, one generated module per GPU arch (sm<arch>.py, written by
rmsnorm_tools.table_gen from sweep results). An arch without a table of its own takes sm_90's, the
one arch swept so far; its shared memory limit still cuts pipelining depths
(rmsnorm.launch.configs.smem_budget)."""

import importlib

TUNED_ARCHS = (90,)
FALLBACK_ARCH = 90


def table_for(arch: int):
    """The table module that serves arch."""
    own = arch if arch in TUNED_ARCHS else FALLBACK_ARCH
    return importlib.import_module(f"rmsnorm.launch.tables.sm{own}")
