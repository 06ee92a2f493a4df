"""One process's translations, greedy and beam 4, printed as one JSON line, for
tests/integration/test_core_count.py to compare between processes pinned to different cores
(``taskset -c 0`` and ``taskset -c 0,1``):

    python tests/helpers/core_count_decoding.py demo WORKDIR   # its whole test split
    python tests/helpers/core_count_decoding.py marian         # a Marian-shaped random model

Every process compiles its own decoders (no compilation cache): the programs XLA makes for
the cores it sees are what is compared.
"""

import json
import os
import sys

import jax
import numpy as np

# The Marian (opus-mt) shape: d_model 512, 6+6 layers, 8 heads, d_ff 2048, 32k pieces
# (+ the start token), tied output projection with a final bias, Post-LN, swish.
MARIAN_SHAPE = dict(
    vocab_size=32001, d_model=512, num_heads=8, d_ff=2048, num_encoder_layers=6,
    num_decoder_layers=6, activation="silu", norm="post", position="sinusoidal",
    sinusoidal_layout="halves", layer_norm_epsilon=1e-5, tie_output=True,
    final_logits_bias=True, scale_embeddings=True, decoder_start_embedding="zero",
    dropout_rate=0.0, max_len=512,
)  # fmt: skip
SENTENCES, SOURCE_LENGTH, MAX_LEN = 4, 24, 40


def demo(workdir: str) -> dict:
    """The trained run's translations of every sentence of its test split, and the scores
    of the beam search's best."""
    from jaxtrans.data.translation.sources import load_split
    from jaxtrans.programs.translator import Translator

    translator = Translator.load(workdir, compilation_cache_dir="")
    sources = [pair.source for pair in load_split(translator.task.run_config.data, "test")]
    best = [found[0] for found in translator.translate(sources, beam_size=4, nbest=1)]
    return {
        "greedy": translator.translate(sources, beam_size=1),
        "beam4": [h.text for h in best],
        # Bit for bit: the same kernels round the same way.
        "beam4 scores": [float(h.score).hex() for h in best],
    }


def _random_params(model, source):
    """Parameters of the model's shapes drawn from a NumPy generator (no compiled init):
    Xavier-normal kernels (queries and keys 3x: a random model's attention would
    otherwise average its positions and every row emit one token), normal(0, d_model **
    -0.5) embeddings, unit norm scales, small normal biases."""
    shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), source, source)["params"])
    rng = np.random.default_rng(0)

    def draw(path, leaf):
        name = jax.tree_util.keystr(path)
        if "scale" in name:
            return np.ones(leaf.shape, leaf.dtype)
        if "bias" in name:
            return (0.1 * rng.standard_normal(leaf.shape)).astype(leaf.dtype)
        if "embedding" in name:
            std = leaf.shape[-1] ** -0.5
        else:  # [in, out], [in, heads, head_dim] or (the out projection) [heads, head_dim, out]
            split = 2 if "'out'" in name else 1
            fan_in, fan_out = np.prod(leaf.shape[:split]), np.prod(leaf.shape[split:])
            std = (2.0 / (fan_in + fan_out)) ** 0.5
            if "'query'" in name or "'key'" in name:
                std *= 3.0  # attention that picks positions, not their mean: rows differ
        return (std * rng.standard_normal(leaf.shape)).astype(leaf.dtype)

    return jax.tree_util.tree_map_with_path(draw, shapes)


def marian() -> dict:
    """Token ids of SENTENCES random sources through a random Marian-shaped model."""
    import flax.linen as nn
    import jax.numpy as jnp

    from jaxtrans.inference.decoding import beam_decode, greedy_decode
    from jaxtrans.inference.options import SearchOptions
    from jaxtrans.models import Transformer, TransformerConfig

    config = TransformerConfig(**MARIAN_SHAPE)
    rng = np.random.default_rng(1)
    source = jnp.asarray(rng.integers(3, config.vocab_size, (SENTENCES, SOURCE_LENGTH)), jnp.int32)
    params = nn.unbox(_random_params(Transformer(config), source))
    lengths = jnp.full((SENTENCES,), MAX_LEN, jnp.int32)
    greedy = greedy_decode(
        params, source, lengths, SearchOptions(beam_size=1), config=config, max_len=MAX_LEN
    )
    beams, scores = beam_decode(
        params, source, lengths, SearchOptions(beam_size=4), config=config, max_len=MAX_LEN
    )
    return {
        "greedy": np.asarray(greedy).tolist(),
        "beam4": np.asarray(beams).tolist(),
        # Bit for bit: the same kernels round the same way.
        "beam4 scores": [float(x).hex() for x in np.asarray(scores).ravel()],
    }


if __name__ == "__main__":
    jax.config.update("jax_compilation_cache_dir", None)
    found = demo(sys.argv[2]) if sys.argv[1] == "demo" else marian()
    print(json.dumps({"cores": len(os.sched_getaffinity(0)), **found}))
