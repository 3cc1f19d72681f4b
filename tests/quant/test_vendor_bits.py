"""rmsnorm_tools.vendor_bits' classification of rows, on the CPU with stand-ins for the vendor
kernels: a row is exact, exact with rstd one ulp off, or unexplained."""

import pytest
import torch

from rmsnorm.launch import quant_contract
from rmsnorm_tools import vendor_bits as vb


class NudgedVllm:
    """vLLM's recipes, with rstd `ulps` up on odd rows (another reduction order) and, with
    `wrong`, the per-token codes of row 0 from y * 1.01 (a misreading)."""

    def __init__(self, wrong=False, ulps=1):
        self.wrong, self.ulps = wrong, ulps

    def _nudged(self, x, w, residual=None, **kw):
        rows = [vb.recipe_y(x, w, residual, ulps=i * self.ulps, **kw) for i in range(2)]
        pick = (torch.arange(x.shape[0]) % 2 == 1)[:, None]
        y = torch.where(pick, rows[1][0], rows[0][0])
        return y, rows[0][1]

    def rms_norm(self, out, x, w, eps):
        out.copy_(self._nudged(x, w, casting_mode="gemma")[0])

    def fused_add_rms_norm(self, x, residual, w, eps):
        y, ro = self._nudged(x, w, residual, casting_mode="gemma")
        x.copy_(y)
        residual.copy_(ro)

    def rms_norm_static_fp8_quant(self, out, x, w, scale, eps):
        y = self._nudged(x, w, casting_mode="gemma")[0]
        out.copy_(quant_contract.quantize(y, out.dtype, scale=scale)[0])

    def rms_norm_dynamic_per_token_quant(self, out, x, w, scales, eps, scale_ub, residual,
                                         group_size=None):
        y, ro = self._nudged(x, w, residual, casting_mode="llama", normalized_sum="fp32")
        q, s = quant_contract.quantize(y, out.dtype, group_size=group_size,
                                       scale_ub=scale_ub, quantizer="vllm_fused")
        if self.wrong:
            q[0] = quant_contract.quantize(y[:1].float() * 1.01, out.dtype,
                                           quantizer="vllm_fused")[0]
        out.copy_(q)
        scales.copy_(s)
        if residual is not None:
            residual.copy_(ro)

    def rms_norm_per_block_quant(self, out, x, w, scales, eps, scale_ub, residual, group_size,
                                 is_scale_transposed):
        self.rms_norm_dynamic_per_token_quant(out, x, w, scales, eps, scale_ub, residual,
                                              group_size)


def classified(vendor, op, dtype=torch.bfloat16):
    x, r, w = vb.inputs("random", (8, 256), dtype, seed=1, device="cpu")
    return vb.classify(*vb.vllm_case(vendor, op, x, r, w))


def test_rows_one_ulp_of_rstd_apart_are_told_from_exact_ones():
    # fp32 rows: one ulp of rstd moves most of y's bits, so the odd rows are not exact.
    c = classified(NudgedVllm(), "rms", torch.float32)
    assert {k: v for k, v in c.items() if not k.startswith("preset.")} == {
        "rows_exact": 0.5, "rows_rstd_ulp": 0.5, "rows_rstd_ulps": 0.0,
        "rows_unexplained": 0.0}
    c = classified(NudgedVllm(ulps=5), "rms", torch.float32)
    assert (c["rows_exact"], c["rows_rstd_ulp"], c["rows_rstd_ulps"]) == (0.5, 0.0, 0.5)
    c = classified(NudgedVllm(ulps=vb.MAX_ULPS + 8), "rms", torch.float32)
    assert c["rows_unexplained"] == 0.5
    # 16-bit outputs move with one ulp of rstd in few elements; none is unexplained.
    for op in ("rms", "tok_fp8", "add_tok_int8", "add_grp128_fp8"):
        c = classified(NudgedVllm(), op)
        assert c["rows_unexplained"] == 0.0, (op, c)
        assert c["rows_exact"] + c["rows_rstd_ulp"] + c["rows_rstd_ulps"] == 1.0


def test_the_presets_rows_are_the_recipes_up_to_rstds_last_bits():
    # rmsnorm's CPU ops under recipe="vllm": each row is the vendor recipe's, rstd at most a
    # few ulps off; where the stand-in moved rstd, the preset's rows differ from it.
    for op in ("rms", "add", "static_fp8", "tok_fp8", "tok_fp8_ub", "add_tok_int8",
               "add_grp128_fp8", "add_grp64_int8_t", "grp128_fp8_ub", "add_grp64_fp8_ub"):
        c = classified(NudgedVllm(), op)
        assert c["preset.rows_unexplained"] == 0.0, (op, c)
        assert c["preset.rows_differ"] <= 1 - c["rows_exact"], (op, c)
    c = classified(NudgedVllm(), "rms", torch.float32)
    assert c["preset.rows_differ"] >= 0.5  # the stand-in's odd rows


def test_a_misread_recipe_leaves_rows_unexplained():
    c = classified(NudgedVllm(wrong=True), "tok_fp8")
    assert c["rows_unexplained"] == 1 / 8


def test_nans_compare_equal_and_other_bits_do_not():
    a = torch.tensor([float("nan"), 1.0, 0.0]).bfloat16()
    b = torch.tensor([-float("nan"), 1.0, -0.0]).bfloat16()
    assert vb.same_bits(a, b).tolist() == [True, True, False]


def test_identical_tensors_differ_in_no_element_at_any_size():
    # On CUDA a float32 mean of 33 x 5120 ones is 1 - 2^-24: 1 - that mean reported a difference.
    device = "cuda" if torch.cuda.is_available() else "cpu"
    t = torch.randn(33, 5120, device=device).to(torch.bfloat16)
    assert vb.frac_diff(t, t.clone()) == 0.0
    u = t.clone()
    u[7, 11] = u[7, 11] * 2 + 1
    assert vb.frac_diff(t, u) == pytest.approx(1 / t.numel())


def test_vendor_candidates_name_the_missing_library(tmp_path, monkeypatch):
    from rmsnorm_tools import vendor_candidates as vc
    monkeypatch.setenv("RMSNORM_PEERS", str(tmp_path))
    vc._vllm.cache_clear()
    vc._flashinfer.cache_clear()
    x = torch.randn(2, 64).bfloat16()
    with pytest.raises(FileNotFoundError, match="vLLM's kernels: no .*libvllm_norm.so"):
        vc.vllm_rms_norm(torch.empty_like(x), x, torch.ones(64).bfloat16(), 1e-6)
    with pytest.raises(FileNotFoundError, match="FlashInfer's kernels: no .*libfi_norm.so"):
        vc.flashinfer_rmsnorm(x, torch.ones(64).bfloat16(), 1e-6)
