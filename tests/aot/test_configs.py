"""The launch table: one rule per shape class, the path switch, and the grid."""

import dataclasses

import pytest

from rmsnorm.launch import configs
import helpers


@pytest.mark.parametrize("elem_bytes", [2, 4, 8])
@pytest.mark.parametrize("fused", [False, True])
def test_every_n_gets_a_launch_that_covers_the_row(elem_bytes, fused):
    for n in list(range(1, 300)) + [1000, 4096, 5000, 32768, 32769, 65536, 262144, 10**7]:
        launch = configs.forward_launch(n, elem_bytes, fused)
        if launch.path == "tile" and launch.chunks == 1:
            # The narrowest power of two that holds the row, but never below MIN_TILE.
            assert launch.block_n == max(configs.MIN_TILE, configs.next_pow2(n))
            assert launch.block_n <= configs.MAX_TILE[elem_bytes]
        elif launch.path == "tile":
            # Chunks of a narrower tile that hold the row, none of them left empty.
            assert launch.block_n * (launch.chunks - 1) < n <= launch.block_n * launch.chunks
            assert launch.block_n * launch.chunks <= \
                configs.widest_tile(elem_bytes, launch.keep_stored)
        else:
            assert n > configs.MAX_TILE[elem_bytes] and launch.rows == 1
        assert launch.num_warps in (1, 2, 4, 8, 16, 32)
        assert launch.block_n & (launch.block_n - 1) == 0


def test_rows_beyond_the_tile_limit_take_the_looped_path():
    # A forward row kept in its 16-bit storage dtype fits twice as wide a tile (sm_90's table
    # keeps bf16 rows of 65536); fp16 and the fused add hold their rows in fp32.
    assert configs.forward_launch(65536, 2, False, dtype="bf16").path == "tile"
    assert configs.forward_launch(65537, 2, False, dtype="bf16").path == "loop"
    assert configs.forward_launch(32768, 2, False, dtype="fp16").path == "tile"
    assert configs.forward_launch(32769, 2, False, dtype="fp16").path == "loop"
    assert configs.forward_launch(32768, 2, True).path == "tile"
    assert configs.forward_launch(32769, 2, True).path == "loop"
    assert configs.forward_launch(16384, 8, False).path == "loop"


def test_pipeline_depth_is_cut_to_the_shared_memory_budget():
    for n in (2048, 8192, 32768):
        for eb in (2, 4):
            launch = configs.forward_launch(n, eb, True, 4)
            per_stage = launch.block_n * (launch.rows * eb * 2 + 4)
            assert (launch.num_stages - 1) * per_stage <= configs.smem_budget(configs.DEFAULT_ARCH)


def test_max_tile_override_reaches_the_looped_path_and_restores():
    with helpers.max_tile(64):
        assert configs.forward_launch(64, 2, False).path == "tile"
        launch = configs.forward_launch(65, 2, False)
        assert launch.path == "loop" and launch.block_n == 64
    assert configs.forward_launch(65, 2, False).path == "tile"
    with pytest.raises(ValueError, match="power of two"):
        with helpers.max_tile(48):
            pass


def test_small_rows_are_packed_several_per_program():
    assert configs.forward_launch(128, 2, False).rows > 1
    assert configs.forward_launch(32768, 2, False).rows == 1


def test_persistent_grid_is_capped_by_the_device():
    launch = configs.forward_launch(4096, 2, False)
    assert launch.grid(1, 132) == 1
    assert launch.grid(10**6, 132) == 132 * launch.programs_per_sm
    small = configs.forward_launch(128, 2, False)
    assert small.grid(100, 132) == -(-100 // small.rows)


def test_shared_memory_budget_follows_the_arch():
    # The pipelined loads of a wide fused-add row fit each arch's shared memory: an sm_89
    # (99 KB) gets fewer stages than an sm_90 (227 KB) for the same row.
    per_arch = {arch: configs.forward_launch(16384, 4, True, 4, arch) for arch in (80, 89, 90)}
    for arch, launch in per_arch.items():
        assert launch.num_stages >= 1
        per_stage = 16384 * launch.rows * 4 * 2 + (16384 * 4 if not launch.w_resident else 0)
        assert (launch.num_stages - 1) * per_stage <= configs.smem_budget(arch)
    assert per_arch[89].num_stages <= per_arch[80].num_stages <= per_arch[90].num_stages
    assert configs.smem_budget(89) < configs.smem_budget(80) < configs.smem_budget(90)


def test_the_reduction_tile_depends_on_n_alone():
    for n in (1, 100, 4096, 65536, 1 << 20):
        block_p, block_c, _ = configs.reduce_launch(n)
        assert block_p * block_c == 8192 and 16 <= block_c <= 256


def test_the_quantized_forward_keeps_the_plain_forwards_columns_and_order():
    """quantized_rule changes what decides speed alone: rows per program (only where one row
    spans every thread in whole vectors, so each thread keeps its columns), the weight's
    residency, with scales from the rows programs per SM, and registers; tiles below
    QUANTIZED_MIN_TILE and looped rows keep the table's launch; the weight is held below
    QUANTIZED_WEIGHT_REREAD_TILE columns and re-read from there; 2-byte tiles whose (columns,
    warps) QUANTIZED_REGISTER_CAPS lists for their op and scales get its register cap."""
    changed = 0
    capped = set()
    for rule in configs.rules():
        if rule.op == "bwd":
            continue
        for scales in configs.QUANTIZED_SCALES:
            row_scales = scales != "static"
            q = configs.quantized_rule(rule, row_scales)
            same = ("path", "block_n", "chunks", "num_warps", "num_stages", "keep_stored",
                    "max_n", "elem_bytes", "dtype")
            assert all(getattr(q, f) == getattr(rule, f) for f in same), (rule, q)
            launch = configs.quantized_launch(rule, scales, 1, 2)
            assert launch == dataclasses.replace(configs.rule_launch(q, 1, 2),
                                                 max_registers=launch.max_registers)
            listed = configs.QUANTIZED_REGISTER_CAPS[(rule.op, scales)].get(
                (launch.block_n * launch.chunks, launch.num_warps), 0)
            assert launch.max_registers == (
                listed if rule.path == "tile" and rule.elem_bytes == 2 else 0), rule
            if launch.max_registers:
                capped.add((rule.op, scales, launch.block_n * launch.chunks, launch.num_warps))
            if rule.path != "tile" or rule.block_n * rule.chunks < configs.QUANTIZED_MIN_TILE:
                assert q == rule
                continue
            changed += 1
            assert q.w_resident == (
                rule.block_n * rule.chunks < configs.QUANTIZED_WEIGHT_REREAD_TILE)
            vec = 16 // rule.elem_bytes
            assert q.rows == (1 if rule.block_n // vec >= 32 * rule.num_warps else rule.rows)
            assert q.programs_per_sm == (
                min(rule.programs_per_sm, configs.QUANTIZED_ROW_SCALE_PROGRAMS_PER_SM)
                if row_scales else rule.programs_per_sm)
    assert changed
    # Every listed cap is reached by a row of the sm_90 table (none is left stale by a new
    # table whose warps moved).
    listed = {(op, scales, tile, warps)
              for (op, scales), caps in configs.QUANTIZED_REGISTER_CAPS.items()
              for tile, warps in caps}
    assert capped == listed
    # The cap reaches the launch and the compile options; the plain forward has none, nor
    # do rows of another element size.
    static = configs.forward_launch(16384, 2, False, 2, dtype="bf16", quantized="static")
    assert static.max_registers == 80
    assert configs.compile_options(True, static.max_registers)["maxnreg"] == 80
    assert configs.forward_launch(16384, 2, False, 2, dtype="bf16").max_registers == 0
    assert configs.forward_launch(16384, 4, False, 4, quantized="group").max_registers == 0
    assert "maxnreg" not in configs.compile_options(True)
    # Per token and per group differ where the sweep found them to.
    token, group = (configs.forward_launch(8192, 2, False, 2, dtype="bf16", quantized=s)
                    for s in ("token", "group"))
    assert (token.max_registers, group.max_registers) == (0, 64)
    assert dataclasses.replace(token, max_registers=64) == group
    quantized = configs.forward_launch(4096, 2, True, 2, dtype="bf16", quantized="token")
    assert quantized.programs_per_sm <= configs.QUANTIZED_ROW_SCALE_PROGRAMS_PER_SM
    with pytest.raises(ValueError, match="one of static, token, group"):
        configs.forward_launch(4096, 2, True, 2, quantized="rows")
