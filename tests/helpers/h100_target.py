"""Compile-only H100s for the tests: XLA's GPU target description of an H100 SXM, to compile
programs for a GPU this machine does not have (jax's CUDA plugin installed, none run).

The description is XLA's xla/tools/hlo_opt/gpu_specs/h100_sxm.txtpb (SM count, shared
memory, bandwidth, compute capability 9.0) with the cuDNN and CUDA versions of the
pinned jax[cuda12] wheels (cuDNN 9.28, CUDA 12.9): cuDNN's fused attention asks for them.
The process must start with JAX_PLATFORMS=cpu and JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1
(GPU_COMPILE_ENV), so that the plugin neither looks for a GPU nor checks its driver.
"""

GPU_COMPILE_ENV = {"JAX_PLATFORMS": "cpu", "JAX_SKIP_CUDA_CONSTRAINTS_CHECK": "1"}

H100_SXM = """
gpu_device_info {
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: 233472
  threads_per_core_limit: 2048
  core_count: 132
  fpus_per_core: 128
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: 3352320000000
  l2_cache_size: 52428800
  clock_rate_ghz: 1.98
  device_memory_size: 84978434048
  shared_memory_per_block_optin: 232448
  cuda_compute_capability { major: 9 }
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}
platform_name: "CUDA"
dnn_version_info { major: 9 minor: 28 }
runtime_version { major: 12 minor: 9 }
device_description_str: "NVIDIA H100 80GB HBM3"
"""


def h100_devices(count: int = 1) -> list:
    """``count`` compile-only H100s of one host (their platform is "gpu"): programs lower
    and compile for them, none runs."""
    from jax.experimental import topologies

    topology = topologies.get_topology_desc(
        platform="cuda", target_config=H100_SXM, topology=f"1x1x{count}"
    )
    return list(topology.devices)
