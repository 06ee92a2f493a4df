"""config.mesh.rules: the logical-axis rules as config, read, checked and applied."""

import json
import os
import subprocess
import sys

import pytest
from paths import REPO, xla_flags

from jaxtrans.errors import UserError
from jaxtrans.training.sharding import LOGICAL_RULES, logical_rules, rules_text


def test_the_default_table_reads_back_as_itself():
    assert logical_rules(rules_text(LOGICAL_RULES)) == LOGICAL_RULES
    assert logical_rules("") == LOGICAL_RULES
    assert "batch=data+fsdp" in rules_text(LOGICAL_RULES)


def test_given_rules_replace_only_their_own_names():
    rules = dict(logical_rules(" embed = none , mlp=fsdp+tensor,vocab="))
    default = dict(LOGICAL_RULES)

    assert rules["embed"] is None and rules["vocab"] is None
    assert rules["mlp"] == ("fsdp", "tensor")
    assert [name for name, _ in logical_rules("mlp=fsdp")] == list(default)
    for name in set(default) - {"embed", "mlp", "vocab"}:
        assert rules[name] == default[name], name


@pytest.mark.parametrize(
    "text, message",
    [
        ("embd=fsdp", "'embd' is no logical axis; use one of batch, embed"),
        ("embed=fsdpp", "'fsdpp' (embed) is no mesh axis; use data, fsdp, tensor"),
        ("mlp=tensor+model", "'model' (mlp) is no mesh axis"),
        ("embed", "'embed' is not logical=mesh_axes"),
        ("embed=fsdp,embed=tensor", "'embed' is given twice"),
        ("mlp=tensor+tensor", "mlp uses a mesh axis twice"),
    ],
)
def test_a_bad_rule_is_a_user_error_saying_what_to_use(text, message):
    with pytest.raises(UserError, match="^--config.mesh.rules=") as raised:
        logical_rules(text)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_train_py_refuses_a_bad_rule_with_one_line_and_status_2(tmp_path):
    result = subprocess.run(
        [sys.executable, "train.py", "--config", "configs/demo.py",
         "--workdir", str(tmp_path / "w"), "--config.mesh.rules=embed=fsdp,heads=model"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "'model' (heads) is no mesh axis" in errors[0], result.stderr
    assert not os.path.exists(tmp_path / "w" / "config.json")


# On 8 forced CPU devices, in a subprocess: the compiled train step's sharding of the
# feed-forward input kernel [embed, mlp] under the default rules and under changed ones.
SHARDING_SCRIPT = """
import json, sys
import jax
import jax.numpy as jnp
import ml_collections
from jaxtrans.models import TransformerConfig
from jaxtrans.tasks.translation.translation_task import TranslationTask
from jaxtrans.training import sharding
from jaxtrans.training.optimizer import make_optimizer
from jaxtrans.training.state import init_train_state
from jaxtrans.training.step import make_train_step

mesh = sharding.make_mesh(ml_collections.ConfigDict(dict(data=2, fsdp=2, tensor=2)))
task = TranslationTask(
    ml_collections.ConfigDict({"train": {"label_smoothing": 0.1},
                               "data": {"max_source_length": 8, "max_target_length": 8}}),
    TransformerConfig(vocab_size=64, d_model=32, num_heads=4, d_ff=64,
                      num_encoder_layers=1, num_decoder_layers=1))
optimizer, schedule = make_optimizer(ml_collections.ConfigDict(dict(
    name="adam", b1=0.9, b2=0.98, eps=1e-9, weight_decay=0.0, schedule="constant",
    noam_factor=1.0, learning_rate=1e-3, warmup_steps=0, clip_norm=1.0)), 32, 10)
ids = jnp.full((8, 8), 5, jnp.int32)
batch = {"source": ids, "target_in": ids, "target_out": ids}
result = {}
for text in sys.argv[1:]:
    rules = sharding.logical_rules(text)
    state, shardings, _ = init_train_state(task.init_params, optimizer, mesh,
                                           jax.random.key(0), rules)
    step = sharding.with_axis_rules(jax.jit(
        lambda s, b: make_train_step(task, optimizer, schedule)(s, b, s.dropout_key()),
        in_shardings=(shardings, sharding.batch_sharding(mesh)),
        out_shardings=(shardings, sharding.replicated(mesh))), mesh, rules)
    state, metrics = step(state, batch)
    path, kernel = next((jax.tree_util.keystr(p), x)
                        for p, x in jax.tree_util.tree_leaves_with_path(state.params)
                        if "['wi']['kernel']" in jax.tree_util.keystr(p))
    spec = lambda s: [list(a) if isinstance(a, tuple) else a for a in s.spec]
    result[text] = {"path": path, "spec": spec(kernel.sharding),
                    "loss": float(metrics["loss"])}
print("RESULT", json.dumps(result))
"""


def test_a_changed_rule_changes_the_compiled_sharding_of_a_parameter():
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env["XLA_FLAGS"] = xla_flags(8)
    changed = "embed=none,mlp=fsdp+tensor"
    result = subprocess.run(
        [sys.executable, "-c", SHARDING_SCRIPT, "", changed],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("RESULT "))
    runs = json.loads(line.removeprefix("RESULT "))

    assert "kernel" in runs[""]["path"]
    assert runs[""]["spec"] == ["fsdp", "tensor"]  # [embed, mlp] by the default table
    assert runs[changed]["spec"] == [None, ["fsdp", "tensor"]]
    # The same step, laid out otherwise.
    assert abs(runs[""]["loss"] - runs[changed]["loss"]) < 1e-5
