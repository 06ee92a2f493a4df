"""A Transformer converted to CTranslate2 (jaxtrans.models.ctranslate2_spec) computes what
jaxtrans computes, for every model setting the conversion has to express: CTranslate2's
teacher-forced log-probabilities equal jaxtrans's (over the tokens jaxtrans may emit), and
its greedy and beam searches (jaxtrans.tasks.translation.ctranslate2_decoding) return
jaxtrans's hypotheses. Random weights, scaled up so that the outputs differ between
sentences; nothing is trained."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrans.inference.options import SearchOptions
from jaxtrans.inference.translate import translate_ids
from jaxtrans.models import Transformer, TransformerConfig
from jaxtrans.models.ctranslate2_spec import transformer_spec
from jaxtrans.tasks.translation.ctranslate2_decoding import translate_tokens
from jaxtrans.vocab import BOS_ID, EOS_ID, PAD_ID

ctranslate2 = pytest.importorskip("ctranslate2")

VOCAB = 40
# Every option the conversion expresses, four models' worth.
SETTINGS = {
    # The paper's model as jaxtrans trains it: Post-LN, interleaved sinusoids, shared and
    # tied tables, a learned start row.
    "paper": {},
    "pre_ln_rope_untied": dict(
        norm="pre", layer_norm_epsilon=1e-6, position="rope", rope_base=500.0,
        tie_output=False, activation="gelu",
    ),
    "learned_positions_bias_scanned": dict(
        position="learned", final_logits_bias=True, scale_embeddings=False,
        activation="gelu_tanh", scan_layers=True,
    ),
    "marian_options_separate_vocabularies": dict(
        sinusoidal_layout="halves", decoder_start_embedding="zero", activation="silu",
        share_embeddings=False, target_vocab_size=30, tie_output=False,
    ),
}  # fmt: skip


def tokens(size: int) -> list[str]:
    return ["<pad>", "</s>", "<s>", "<unk>"] + [f"w{i}" for i in range(4, size)]


def converted(name: str, tmp_path):
    """(config, params, ctranslate2.Translator) of a random model with SETTINGS[name]."""
    config = TransformerConfig(
        vocab_size=VOCAB, d_model=32, num_heads=4, d_ff=64, num_encoder_layers=2,
        num_decoder_layers=2, dropout_rate=0.0, attention_dropout_rate=0.0,
        activation_dropout_rate=0.0, max_len=64, **SETTINGS[name],
    )  # fmt: skip
    ones = np.ones((1, 8), np.int32)
    params = nn.unbox(Transformer(config).init(jax.random.key(0), ones, ones)["params"])
    rng = np.random.default_rng(1)
    params = jax.tree.map(
        lambda x: np.asarray(x) + rng.normal(scale=0.3, size=x.shape).astype(np.float32), params
    )
    spec = transformer_spec(config, params, tokens(VOCAB), tokens(config.output_vocab_size))
    spec.validate()
    spec.optimize()
    spec.save(str(tmp_path))
    return config, params, ctranslate2.Translator(str(tmp_path), device="cpu")


def sources(count: int, seed: int = 2) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [list(map(int, rng.integers(7, VOCAB, size=rng.integers(2, 12)))) for _ in range(count)]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_ctranslate2_scores_a_target_as_jaxtrans_does(name, tmp_path):
    config, params, translator = converted(name, tmp_path)
    names = tokens(config.output_vocab_size)
    source, target = sources(1)[0], sources(1, seed=5)[0][: config.output_vocab_size]
    target = [t % config.output_vocab_size for t in target]
    apply = jax.jit(Transformer(config).apply)
    logits = apply({"params": params}, np.array([[*source, EOS_ID]]), np.array([[BOS_ID, *target]]))
    allowed = logits.at[..., PAD_ID].set(-jnp.inf).at[..., BOS_ID].set(-jnp.inf)
    logprobs = jax.nn.log_softmax(allowed)[0]
    ours = [float(logprobs[i, t]) for i, t in enumerate([*target, EOS_ID])]
    (scored,) = translator.score_batch(
        [[tokens(VOCAB)[i] for i in source]], [[names[i] for i in target]]
    )
    np.testing.assert_allclose(scored.log_probs, ours, atol=5e-5, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SETTINGS))
@pytest.mark.parametrize("beam_size, alpha", [(1, 0.0), (4, 0.6)])
def test_ctranslate2_searches_find_jaxtrans_hypotheses(name, beam_size, alpha, tmp_path):
    config, params, translator = converted(name, tmp_path)
    ids = sources(24)
    ours = translate_ids(
        config, params, [[*s, EOS_ID] for s in ids],
        SearchOptions(beam_size=beam_size, alpha=alpha, max_extra_length=8, penalty_form="hf"),
    )  # fmt: skip
    pieces = tokens(VOCAB)
    options = SearchOptions(beam_size=beam_size, alpha=alpha, max_extra_length=8, penalty_form="hf")
    theirs = translate_tokens(translator, [[pieces[i] for i in s] for s in ids], options)
    names = tokens(config.output_vocab_size)
    assert [[names[i] for i in hypothesis] for hypothesis in ours] == theirs
    # Some end before their limit, some run to it: both ways of finishing are compared.
    assert len({len(h) for h in theirs}) > 1
    if beam_size > 1:  # length_penalty 0: CTranslate2 stops when the best candidate ends
        exit_early = dict(beam_size=beam_size, alpha=0.0, max_extra_length=8)
        ours = translate_ids(
            config, params, [[*s, EOS_ID] for s in ids], SearchOptions(**exit_early)
        )
        theirs = translate_tokens(
            translator, [[pieces[i] for i in s] for s in ids], SearchOptions(**exit_early)
        )
        assert [[names[i] for i in hypothesis] for hypothesis in ours] == theirs
