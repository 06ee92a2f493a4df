"""Hugging Face Marian (opus-mt) checkpoints in the jaxtrans Transformer, against
transformers.MarianMTModel: the same encoder output and logits, the same greedy and beam
search outputs, the export back to Marian, and the settings that cannot be converted.

The Marian models are small and random, built here and saved with save_pretrained;
nothing is downloaded.
"""

import dataclasses
import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import save_file

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from jaxtrans.errors import UserError  # noqa: E402
from jaxtrans.inference.decoding import beam_decode, greedy_decode  # noqa: E402
from jaxtrans.inference.options import SearchOptions  # noqa: E402
from jaxtrans.models import Transformer, TransformerConfig  # noqa: E402
from jaxtrans.models.marian.marian_from_huggingface import from_huggingface, marian_to_model_ids  # noqa: E402
from jaxtrans.models.marian.marian_to_huggingface import to_huggingface, token_rows  # noqa: E402
from jaxtrans.vocab import BOS_ID, EOS_ID, PAD_ID  # noqa: E402

# Marian's ids in the checkpoints built here: </s> 0, <pad> = decoder start = PAD.
MARIAN_EOS = 0
MAX_NEW_TOKENS = 10
# The decoder_start_token_id of the "start_token" variant: neither <pad> nor </s>.
START_TOKEN = 7
# Variants: a shared vocabulary whose <pad> is last (opus-mt), and separate source and
# target vocabularies (pad last in the target's only), without the embedding scale.
VARIANTS = {
    "shared": dict(vocab_size=120, share_encoder_decoder_embeddings=True, scale_embedding=True),
    "separate": dict(
        vocab_size=100,
        decoder_vocab_size=80,
        share_encoder_decoder_embeddings=False,
        scale_embedding=False,
    ),
    # opus-mt's layout, but a <pad> row (the decoder start) that is not zero, as in a model
    # made or fine-tuned in transformers 5, which no longer zeroes it.
    "start_row": dict(vocab_size=120, share_encoder_decoder_embeddings=True, scale_embedding=True),
    # A decoder start that is not <pad> (transformers allows any token): an ordinary
    # token's row, which it also emits, and separate tables with an untied output.
    "start_token": dict(
        vocab_size=100,
        decoder_vocab_size=90,
        decoder_start_token_id=START_TOKEN,
        share_encoder_decoder_embeddings=False,
        tie_word_embeddings=False,
        scale_embedding=True,
    ),
}
# transformers' logits processors, as generate and SearchOptions name them.
PROCESSORS = dict(repetition_penalty=1.5, no_repeat_ngram_size=2)
# A bias on </s> per variant, so that some outputs end before the length limit, some not.
EOS_BIAS = {"shared": 6.0, "separate": 3.5, "start_row": 6.0, "start_token": 4.0}


def _marian_config(**changes) -> "transformers.MarianConfig":
    target_vocab = changes.get("decoder_vocab_size") or changes["vocab_size"]
    values = dict(
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        pad_token_id=target_vocab - 1,
        decoder_start_token_id=target_vocab - 1,
        eos_token_id=MARIAN_EOS,
        max_position_embeddings=64,
        activation_function="swish",
        init_std=0.3,  # larger than the default: logits far apart, no near-ties
    )
    values.update(changes)
    return transformers.MarianConfig(**values)


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def marian(request, tmp_path_factory):
    """(directory, MarianMTModel in eval mode, its MarianConfig)."""
    torch.manual_seed(0)
    config = _marian_config(**VARIANTS[request.param])
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        bias = torch.randn(model.final_logits_bias.shape) * 0.5
        bias[0, MARIAN_EOS] += EOS_BIAS[request.param]
        # Generation forbids <pad> (bad_words_ids, as in opus-mt), but Hugging Face's beam
        # search normalises over it first; a trained model gives it no probability.
        bias[0, config.pad_token_id] = -30.0
        model.final_logits_bias.copy_(bias)
        if request.param == "start_row":
            start = model.get_decoder().embed_tokens.weight[config.decoder_start_token_id]
            start.copy_(torch.randn(start.shape) * 0.5)
    directory = tmp_path_factory.mktemp(f"marian-{request.param}")
    model.save_pretrained(directory)
    return directory, model, config


def _sources(config, rows: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Marian source ids [rows, 9] of different lengths (</s> last, <pad> after) and the
    attention mask."""
    rng = np.random.default_rng(1)
    lengths = [9, 3, 6, 1][:rows]
    ids = np.full((rows, max(lengths)), config.pad_token_id)
    for row, n in enumerate(lengths):
        ids[row, : n - 1] = rng.integers(3, config.pad_token_id, size=n - 1)
        ids[row, n - 1] = MARIAN_EOS
    return ids, ids != config.pad_token_id


def _to_model(config, side: str) -> np.ndarray:
    size = config.vocab_size if side == "source" else config.decoder_vocab_size
    return marian_to_model_ids(size, config.pad_token_id, config.eos_token_id)


def test_marian_to_model_ids_puts_pad_eos_and_the_start_on_the_reserved_ids():
    v = 10
    to_model = marian_to_model_ids(v, pad_id=v - 1, eos_id=0)  # opus-mt: </s> 0, <unk> 1
    assert to_model.tolist() == [EOS_ID, v - 1, v, 3, 4, 5, 6, 7, 8, PAD_ID, BOS_ID]
    # Any layout: the specials land on 0, 1, 2; whatever held those takes their places.
    for pad, eos in [(0, 1), (1, 0), (2, 5), (5, 2), (7, 3)]:
        to_model = marian_to_model_ids(v, pad, eos)
        assert sorted(to_model.tolist()) == list(range(v + 1))
        assert (to_model[pad], to_model[eos], to_model[v]) == (PAD_ID, EOS_ID, BOS_ID)
        moved = sorted(set(range(3)) - {pad, eos})
        assert sorted(to_model[moved].tolist()) == sorted({pad, eos, v} - set(range(3)))
        others = [i for i in range(3, v) if i not in (pad, eos)]
        assert to_model[others].tolist() == others


@pytest.mark.slow
def test_encoder_output_and_logits_equal_marian(marian):
    directory, model, hf = marian
    config, params = from_huggingface(directory)
    source, mask = _sources(hf)
    target = np.random.default_rng(2).integers(3, hf.decoder_vocab_size - 1, size=(4, 7))
    target[:, 0] = hf.decoder_start_token_id
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor(source),
            attention_mask=torch.tensor(mask),
            decoder_input_ids=torch.tensor(target),
        )
    src_ids, tgt_ids = _to_model(hf, "source")[source], _to_model(hf, "target")[target]
    tgt_ids[:, 0] = BOS_ID  # Marian starts from <pad>; jaxtrans from BOS, whose row copies it
    jax_model = Transformer(config)
    memory = jax_model.apply({"params": params}, src_ids, method=Transformer.encode)
    expected = out.encoder_last_hidden_state.numpy()
    np.testing.assert_allclose(np.asarray(memory)[mask], expected[mask], atol=1e-5, rtol=0)
    logits = np.asarray(jax_model.apply({"params": params}, src_ids, tgt_ids))
    marian_order = _to_model(hf, "target")[: hf.decoder_vocab_size]  # model id per Marian id
    np.testing.assert_allclose(logits[..., marian_order], out.logits.numpy(), atol=1e-5, rtol=0)


def _generate(model, hf, source, mask, **settings) -> np.ndarray:
    """Marian's generate -> model ids [rows, MAX_NEW_TOKENS], PAD after the end."""
    model.generation_config.forced_eos_token_id = None  # jaxtrans does not force EOS
    with torch.no_grad():
        out = model.generate(
            input_ids=torch.tensor(source),
            attention_mask=torch.tensor(mask),
            max_new_tokens=MAX_NEW_TOKENS,
            do_sample=False,
            bad_words_ids=[[hf.pad_token_id]],
            **settings,
        ).numpy()
    assert (out[:, 0] == hf.decoder_start_token_id).all()
    tokens = np.full((len(source), MAX_NEW_TOKENS), PAD_ID)
    tokens[:, : out.shape[1] - 1] = _to_model(hf, "target")[out[:, 1:]]
    return tokens


def _model_inputs(directory, hf):
    config, params = from_huggingface(directory)
    source, mask = _sources(hf)
    lengths = jnp.full((len(source),), MAX_NEW_TOKENS)
    return config, params, source, mask, jnp.asarray(_to_model(hf, "source")[source]), lengths


@pytest.mark.slow
def test_greedy_search_equals_marian_generate(marian):
    directory, model, hf = marian
    config, params, source, mask, src_ids, lengths = _model_inputs(directory, hf)
    expected = _generate(model, hf, source, mask, num_beams=1)
    got = greedy_decode(params, src_ids, lengths, config=config, max_len=MAX_NEW_TOKENS)
    np.testing.assert_array_equal(np.asarray(got), expected)
    ended = [EOS_ID in row for row in expected.tolist()]
    assert any(ended) and not all(ended)  # both ways of stopping are exercised


@pytest.mark.slow
def test_beam_search_with_hf_length_penalty_equals_marian_generate(marian):
    directory, model, hf = marian
    config, params, source, mask, src_ids, lengths = _model_inputs(directory, hf)
    alpha = 1.0
    # jaxtrans's beam search stops a row when no live hypothesis can beat its finished
    # ones at the longest length: Hugging Face's early_stopping="never".
    expected = _generate(
        model, hf, source, mask, num_beams=4, length_penalty=alpha, early_stopping="never"
    )
    tokens, _ = beam_decode(
        params,
        src_ids,
        lengths,
        SearchOptions(beam_size=4, alpha=alpha, penalty_form="hf"),
        config=config,
        max_len=MAX_NEW_TOKENS,
    )
    np.testing.assert_array_equal(np.asarray(tokens)[:, 0], expected)
    assert any(EOS_ID in row for row in expected.tolist())


@pytest.mark.slow
@pytest.mark.parametrize("beam_size", [1, 4])
def test_logits_processors_equal_marian_generate_with_the_same_settings(marian, beam_size):
    """repetition_penalty and no_repeat_ngram_size as transformers runs them: on the
    logits in greedy search, on the log-probabilities in beam search."""
    directory, model, hf = marian
    config, params, source, mask, src_ids, lengths = _model_inputs(directory, hf)
    search = dict(num_beams=beam_size, length_penalty=1.0, early_stopping="never")
    expected = _generate(model, hf, source, mask, **search, **PROCESSORS)
    assert not np.array_equal(expected, _generate(model, hf, source, mask, **search))
    options = SearchOptions(beam_size=beam_size, alpha=1.0, penalty_form="hf", **PROCESSORS)
    if beam_size == 1:
        got = greedy_decode(
            params, src_ids, lengths, options, config=config, max_len=MAX_NEW_TOKENS
        )
    else:
        got, _ = beam_decode(
            params, src_ids, lengths, options, config=config, max_len=MAX_NEW_TOKENS,
            best_only=True,
        )  # fmt: skip
    np.testing.assert_array_equal(np.asarray(got), expected)


def test_the_decoder_starts_where_the_directory_starts_it(marian):
    """A zero <pad> row is Marian's zero start (its exports stay exact), any other row the
    start row itself, as transformers reads it."""
    directory, model, hf = marian
    config, params = from_huggingface(directory)
    start_row = model.get_decoder().embed_tokens.weight[hf.decoder_start_token_id]
    nonzero = bool(torch.any(start_row != 0))
    assert nonzero == (directory.name.startswith(("marian-start_row", "marian-start_token")))
    assert config.decoder_start_embedding == ("learned" if nonzero else "zero")
    table = params.get("target_embedding", params["source_embedding"])["embedding"]
    np.testing.assert_array_equal(table[BOS_ID], start_row.detach().numpy())


def test_export_gives_back_the_marian_checkpoint(marian):
    """One size, and separate sizes with <pad> at the smaller one's last id (Marian's one
    pad id, where the export puts it). A start other than <pad> comes back as an equal
    model: starting from <pad>, whose embedding rows hold the start token's."""
    directory, model, hf = marian
    hf_config, state = to_huggingface(*from_huggingface(directory))
    original = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    starts = ["model.shared.weight", "model.decoder.embed_tokens.weight"]
    if hf.share_encoder_decoder_embeddings:
        starts.append("model.encoder.embed_tokens.weight")
    for name in set(starts) & set(original):
        original[name][hf.pad_token_id] = original[name][hf.decoder_start_token_id]
    assert hf_config["pad_token_id"] == hf_config["decoder_start_token_id"] == hf.pad_token_id
    assert (hf_config["vocab_size"], hf_config["decoder_vocab_size"]) == (
        hf.vocab_size,
        hf.decoder_vocab_size,
    )
    for name, tensor in state.items():
        np.testing.assert_array_equal(tensor, original[name], err_msg=name)


EXPORTABLE = {
    # The paper's model as jaxtrans trains it (interleaved sinusoids), shared and tied.
    "paper": dict(layer_norm_epsilon=1e-5, decoder_start_embedding="zero"),
    # Marian's own options, separate vocabularies of one size, an untied output.
    "marian_options": dict(
        layer_norm_epsilon=1e-5,
        decoder_start_embedding="zero",
        activation="gelu_tanh",
        sinusoidal_layout="halves",
        scale_embeddings=False,
        share_embeddings=False,
        target_vocab_size=40,
        tie_output=False,
    ),
    # Separate vocabularies of different sizes: <pad> at the target's last id, inside the
    # source's.
    "separate_sizes": dict(
        layer_norm_epsilon=1e-5,
        decoder_start_embedding="zero",
        share_embeddings=False,
        target_vocab_size=30,
        tie_output=False,
    ),
    # A learned start row (the default), written as <pad>'s row, where transformers starts.
    "learned_start": dict(layer_norm_epsilon=1e-5),
    # Layers as one scanned stack: exported per layer.
    "scanned": dict(layer_norm_epsilon=1e-5, decoder_start_embedding="zero", scan_layers=True),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPORTABLE))
def test_exported_model_computes_the_same_logits_in_marian(name, tmp_path):
    config = TransformerConfig(
        vocab_size=40,
        d_model=32,
        num_heads=4,
        d_ff=64,
        num_encoder_layers=2,
        num_decoder_layers=2,
        **EXPORTABLE[name],
    )
    rng = np.random.default_rng(3)
    source = rng.integers(3, 40, size=(2, 6))
    source[:, -1], source[1, 3], source[1, 4:] = EOS_ID, EOS_ID, PAD_ID
    target = rng.integers(3, config.output_vocab_size, size=(2, 5))
    target[:, 0] = BOS_ID
    if config.tie_output:  # a non-zero bias, so that its export is checked
        config = dataclasses.replace(config, final_logits_bias=True)
    model = Transformer(config)
    params = nn.unbox(model.init(jax.random.key(0), source, target)["params"])
    if config.final_logits_bias:
        params["final_logits_bias"] = jnp.asarray(
            rng.normal(size=config.output_vocab_size), jnp.float32
        )
    expected = np.asarray(model.apply({"params": params}, source, target))

    hf_config, state = to_huggingface(config, params)
    (tmp_path / "config.json").write_text(json.dumps(hf_config))
    save_file(state, str(tmp_path / "model.safetensors"))
    marian = transformers.MarianMTModel.from_pretrained(tmp_path).eval()
    to_marian = []  # per side: the Marian id of each model id but PAD (left out)
    for rows in token_rows(config):  # the model id of each Marian id
        to_marian.append(np.zeros(len(rows) + 1, int))
        to_marian[-1][rows] = np.arange(len(rows))
    src = np.where(source == PAD_ID, hf_config["pad_token_id"], to_marian[0][source])
    with torch.no_grad():
        out = marian(
            input_ids=torch.tensor(src),
            attention_mask=torch.tensor(source != PAD_ID),
            decoder_input_ids=torch.tensor(to_marian[1][target]),
        )
    target_rows = token_rows(config)[1]
    # But for <pad>, the decoder start: its embedding row is the zero start, so a tied
    # output gives it its bias alone. Neither side ever emits it (bad_words_ids; BOS).
    emitted = target_rows != BOS_ID
    np.testing.assert_allclose(
        out.logits.numpy()[..., emitted], expected[..., target_rows[emitted]], atol=1e-5, rtol=0
    )


REFUSED = [
    ({"normalize_before": True}, "normalize_before"),
    ({"normalize_embedding": True}, "normalize_embedding"),
    ({"add_final_layer_norm": True}, "add_final_layer_norm"),
    ({"static_position_embeddings": False}, "static_position_embeddings"),
    ({"activation_function": "gelu_fast"}, "activation_function"),
    ({"decoder_start_token_id": 10**6}, "decoder_start_token_id"),
    ({"decoder_start_token_id": None}, "decoder_start_token_id"),
    ({"decoder_ffn_dim": 32}, "decoder_ffn_dim"),
    ({"model_type": "bart"}, "model_type"),
]


@pytest.mark.parametrize(("change", "key"), REFUSED, ids=[k for _, k in REFUSED])
def test_settings_that_cannot_be_converted_are_refused_naming_the_key(marian, change, key):
    directory = marian[0]
    contents = json.loads((directory / "config.json").read_text())
    copy = directory.parent / f"{directory.name}-{key}"
    copy.mkdir(exist_ok=True)
    (copy / "config.json").write_text(json.dumps({**contents, **change}))
    (copy / "model.safetensors").write_bytes((directory / "model.safetensors").read_bytes())
    with pytest.raises(UserError, match=key):
        from_huggingface(copy)


@pytest.mark.parametrize(
    ("change", "setting"),
    [
        (dict(norm="pre"), "norm"),
        (dict(position="rope"), "position"),
        (dict(position="learned"), "position"),
        (dict(layer_norm_epsilon=1e-6), "layer_norm_epsilon"),
        (dict(share_embeddings=False, target_vocab_size=3), "target_vocab_size"),
    ],
)
def test_export_refuses_what_marian_cannot_express(change, setting):
    config = TransformerConfig(vocab_size=40, d_model=16, num_heads=2, d_ff=32, **change)
    with pytest.raises(UserError, match=setting):
        to_huggingface(config, {})
