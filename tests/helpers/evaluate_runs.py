"""The small saved translation run that evaluate.py's tests ask (tests/integration/
test_evaluate_cli.py, test_evaluate_ensemble.py): no training, a tokenizer trained on the
demo corpus and checkpoints of random parameters at STEPS; and evaluate.py called in-process.
"""

import json

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxtrans.data.translation.data_config import get_data_config
from jaxtrans.data.translation.tokenizer import load_or_train_tokenizer
from jaxtrans.models import Transformer, TransformerConfig
from jaxtrans.programs.evaluate import main
from jaxtrans.workdirs.checkpoint_meta import CheckpointMeta
from jaxtrans.workdirs.checkpoints import Checkpointer

STEPS = (100, 200)
# Input lines for the --input tests.
LINES = ["hello", "the small cat", "ok", "yes, no"]


def make_saved_run(tmp_path_factory):
    """(workdir, {step: params}): config.json, a tokenizer trained on the demo corpus,
    and checkpoints at STEPS."""
    workdir = tmp_path_factory.mktemp("run")
    data_config = get_data_config()
    data_config.vocab_size = 200
    data_config.demo_train_size = 2000
    data_config.demo_dev_size = 6
    data_config.demo_test_size = 6
    tokenizer = load_or_train_tokenizer(data_config, str(workdir))
    model = dict(
        vocab_size=tokenizer.source_vocab_size,
        target_vocab_size=None,
        share_embeddings=True,
        tie_output=True,
        d_model=16,
        num_heads=2,
        d_ff=32,
        num_encoder_layers=1,
        num_decoder_layers=1,
        max_len=64,
        position="learned",
    )
    run_config = {"model": model, "data": data_config.to_dict(), "eval": {"beam_size": 2}}
    (workdir / "config.json").write_text(json.dumps(run_config))
    ids = jnp.ones((1, 4), jnp.int32)
    init = jax.jit(Transformer(TransformerConfig(**model)).init)
    checkpointer = Checkpointer(str(workdir), async_save=False)
    saved = {}
    for seed, step in enumerate(STEPS):
        saved[step] = nn.unbox(init(jax.random.key(seed), ids, ids))["params"]
        rng = jnp.zeros((2,), jnp.uint32)
        opt_state = {"count": jnp.zeros((), jnp.int32)}
        checkpointer.save(step, saved[step], opt_state, rng, CheckpointMeta(step))
    checkpointer.close()
    return workdir, saved


def evaluate(*flags: str) -> None:
    main(["evaluate.py", *flags])
