"""compare.model on a tiny randomly initialised Llama: per-layer diagnosis and the drift of the
hidden states when the candidate replaces every norm."""

import pytest
import torch

from rmsnorm import compare
from rmsnorm.compare import space

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=32)
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16).eval()
    with torch.no_grad():  # norms start at ones, which would hide llama vs gemma rounding
        for m in model.modules():
            if type(m).__name__ == "LlamaRMSNorm":
                m.weight.copy_(torch.rand(64) + 0.5)
    return model


def candidate(r):
    return lambda x, weight, eps: space.evaluate(r, x, weight, eps).y


def test_the_module_recipe_gives_every_layer_exactly_and_no_drift(llama):
    ids = torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(1))
    report = compare.model(llama, {"input_ids": ids}, candidate(space.Recipe()))
    assert len(report.layers) == 5  # two per block and the final norm
    for layer in report.layers:
        assert layer.identical_to_module == 1.0
        assert layer.report.exact and "hf_llama" in layer.report.names
    assert report.logits_max_abs == 0 and report.kl == 0
    assert all(d["max_abs"] == 0 for d in report.drift)


def test_gemma_rounding_in_a_llama_is_named_per_layer_and_drifts(llama):
    ids = torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(2))
    report = compare.model(llama, ids, candidate(space.Recipe(rounding="gemma")))
    for layer in report.layers:
        assert 0.5 < layer.identical_to_module < 1.0
        assert layer.report.exact and layer.report.best["rounding"] == "gemma"
        assert layer.max_ulp_to_module >= 1
    assert report.drift[0]["max_abs"] == 0  # the embeddings, before any norm
    assert report.drift[-1]["max_abs"] > 0 and report.logits_max_abs > 0 and report.kl > 0
    assert "the candidate is HF Gemma" in report.summary()
    assert '"kl"' in report.to_json()


def test_a_model_without_hf_norms_is_refused():
    with pytest.raises(ValueError, match="no RMSNorm module"):
        compare.model(torch.nn.Linear(4, 4), torch.zeros(1, 4), candidate(space.Recipe()))


def test_the_candidates_output_is_checked_in_the_model_too(llama):
    # Right while each layer is diagnosed, float64 once it replaces the norms: the second
    # forward holds it to the same rules instead of casting it back silently.
    calls = []

    def later_float64(x, weight, eps):
        calls.append(1)
        y = space.evaluate(space.Recipe(), x, weight, eps).y
        return y if len(calls) <= 5 else y.double()

    ids = torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(3))
    with pytest.raises(compare.CandidateError, match="y is torch.float64"):
        compare.model(llama, ids, later_float64)
