"""Parameterised primitives carrying logical axis names, in the configured dtypes.

Every parameter is annotated with logical axes (``embed``, ``heads``, ``kv``, ``mlp``,
``vocab``, ``length``) so that sharding is a table of rules, not code.
"""

import flax.linen as nn

from jaxtrans.nn.block_config import BlockConfig

xavier_uniform = nn.initializers.xavier_uniform()


def dense(
    config: BlockConfig, features: int, axes: tuple[str, str], name: str | None = None
) -> nn.Dense:
    """Dense layer with a Xavier-uniform kernel [in, out] and zero bias [out]."""
    return nn.Dense(
        features,
        dtype=config.compute_dtype,
        param_dtype=config.storage_dtype,
        kernel_init=nn.with_logical_partitioning(xavier_uniform, axes),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, axes[1:]),
        name=name,
    )


def layer_norm(config: BlockConfig, name: str | None = None) -> nn.LayerNorm:
    """LayerNorm over d_model; statistics are computed in float32 whatever the dtype."""
    return nn.LayerNorm(
        epsilon=config.layer_norm_epsilon,
        dtype=config.compute_dtype,
        param_dtype=config.storage_dtype,
        scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
        name=name,
    )


def embedding(
    config: BlockConfig, num_embeddings: int, name: str | None = None, init=xavier_uniform
) -> nn.Embed:
    """Token embedding table [num_embeddings, d_model]; ``.attend`` gives tied logits."""
    return nn.Embed(
        num_embeddings,
        config.d_model,
        dtype=config.compute_dtype,
        param_dtype=config.storage_dtype,
        embedding_init=nn.with_logical_partitioning(init, ("vocab", "embed")),
        name=name,
    )
