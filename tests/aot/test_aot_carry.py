"""rmsnorm.aot.carry copies exactly the cache entries of the current specs, cubin and metadata,
and refuses, naming the build command, when a build has not made them all."""

import pytest

from rmsnorm.aot import build as aot, carry as aot_carry


@pytest.fixture
def few_specs(monkeypatch):
    specs = [aot.Spec("fwd", "bf16", True, True), aot.Spec("bwd", "fp32", True, has_dw=True),
             aot.Spec("reduce", "fp16", variant=aot.reduce_blocks()[0].bit_length() - 1)]
    monkeypatch.setattr(aot, "specs", lambda arch: specs)
    return specs


def fill_cache(out, specs, arch=90, skip=()):
    cache, sources = out / "cache", aot._sources_hash()
    paths = []
    for spec in specs:
        path = aot._cache_path(cache, spec, arch, sources)
        paths.append(path)
        if spec in skip:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'{{"name": "{spec.op}"}}')
        path.with_suffix(".cubin").write_bytes(spec.op.encode())
        path.with_suffix(".ptx").write_text("not carried")
    return cache, paths


def test_carry_copies_each_current_entry_and_nothing_else(tmp_path, few_specs):
    out, dst = tmp_path / "aot", tmp_path / "carry"
    cache, paths = fill_cache(out, few_specs)
    (cache / "sm90" / "stale.json").write_text("{}")  # an entry of an older table
    dst.mkdir()
    (dst / "left-over").write_text("from an earlier carry")
    assert aot_carry.carry(out, dst, [90]) == len(paths)
    copied = sorted(p.relative_to(dst) for p in dst.rglob("*") if p.is_file())
    want = sorted(q.relative_to(cache) for p in paths for q in (p, p.with_suffix(".cubin")))
    assert copied == want
    for p in paths:
        target = dst / p.relative_to(cache)
        assert target.read_text() == p.read_text()
        assert target.with_suffix(".cubin").read_bytes() == p.with_suffix(".cubin").read_bytes()


def test_carry_refuses_an_incomplete_build_and_names_the_command(tmp_path, few_specs):
    out = tmp_path / "aot"
    fill_cache(out, few_specs, skip=few_specs[1:2])
    with pytest.raises(SystemExit, match=r"1 of 3 kernels are not in .*bash scripts/test_cpp.sh"):
        aot_carry.carry(out, tmp_path / "carry", [90])
    assert not (tmp_path / "carry").exists()
