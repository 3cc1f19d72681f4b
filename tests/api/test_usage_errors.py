"""docs/USAGE.md's table of errors is what the functions raise: every row's example, run,
raises the kind of error the row names (not a subclass, not another kind)."""

import re

import pytest
import torch

import rmsnorm
from helpers import ROOT

USAGE = ROOT / "docs" / "USAGE.md"
ERRORS = {"TypeError": TypeError, "ValueError": ValueError, "RuntimeError": RuntimeError}


def _table_rows():
    text = USAGE.read_text()
    section = text[text.index("\n## Errors\n"):]
    section = section[:section.find("\n## ", 1)] if "\n## " in section[1:] else section
    rows = re.findall(r"^\| `(\w+)` \| (.+?) \| `([^`]+)` \|$", section, re.M)
    assert len(rows) >= 30, f"the Errors table of {USAGE.name} was not found whole"
    return rows


@pytest.mark.parametrize("kind,cause,example", _table_rows(), ids=lambda v: v[:60])
def test_each_example_raises_its_kind(kind, cause, example):
    names = dict(torch=torch, rmsnorm=rmsnorm, x=torch.randn(4, 8), w=torch.ones(8),
                 r=torch.randn(4, 8))
    assert kind in ERRORS, f"{kind} is not a kind the table may name"
    with pytest.raises(Exception) as raised:
        eval(example, names)  # noqa: S307 - the examples are the documentation's own
    assert type(raised.value) is ERRORS[kind], \
        f"{example} ({cause}) raised {type(raised.value).__name__}: {raised.value}"
