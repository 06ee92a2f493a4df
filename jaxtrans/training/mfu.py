"""Peak FLOP/s of a device and model FLOPs utilisation (MFU).

The model FLOPs of a step come from the task (counted by jaxtrans.models.model_flops).
The peak is looked up by the device's ``device_kind`` as the runtime reports it, which is
not the product name: a v5p says "TPU v5", a v5e "TPU v5 lite", a v6e "TPU v6 lite", an
H100 SXM "NVIDIA H100 80GB HBM3", an A100 "NVIDIA A100-SXM4-80GB".
"""

import re

import jax

# Dense bfloat16 peak FLOP/s of one JAX device (float16 for the V100, which has no
# bfloat16), from the vendors' specifications: (pattern, peak), the first pattern that
# matches the whole device_kind (case ignored) wins, so a variant comes before its family.
# A TPU v2 or v3 chip is two devices (one per TensorCore), so a device is half the chip's
# 45 or 123 TFLOP/s; from v4 on a device is a chip. The product names ("TPU v5p", "TPU v5e",
# "TPU v6e") are taken too, as jax's own tables take them.
PEAK_FLOPS: tuple[tuple[str, float], ...] = (
    (r"TPU v2", 22.5e12),
    (r"TPU v3", 61.5e12),
    (r"TPU v4", 275e12),
    (r"TPU v5 ?lite|TPU v5e", 197e12),
    (r"TPU v5p?", 459e12),
    (r"TPU v6 ?lite|TPU v6e", 918e12),
    (r"NVIDIA H100 PCIe", 756e12),
    (r"NVIDIA H(100|200) NVL", 835e12),
    (r"NVIDIA (H100|H200|H800|GH200)\b.*", 989e12),
    (r"NVIDIA A100\b.*", 312e12),
    (r"NVIDIA B200\b.*", 2250e12),
    (r"NVIDIA L4", 121e12),
    (r"(Tesla|NVIDIA) V100\b.*", 125e12),
)


def peak_flops_of(device_kind: str) -> float | None:
    """The peak FLOP/s of one device of ``device_kind`` (PEAK_FLOPS), None if unknown."""
    kind = device_kind.strip()
    for pattern, peak in PEAK_FLOPS:
        if re.fullmatch(pattern, kind, flags=re.IGNORECASE):
            return peak
    return None


def device_peak_flops(override: float = 0.0) -> float | None:
    """Peak FLOP/s of one local device: ``override`` if set, else the table, else None."""
    if override:
        return float(override)
    return peak_flops_of(jax.devices()[0].device_kind)


def mfu(
    step_flops: float, step_seconds: float, num_devices: int, peak: float | None
) -> float | None:
    """Achieved model FLOP/s as a fraction of the devices' peak (None when the peak is unknown)."""
    if not peak or step_seconds <= 0:
        return None
    return step_flops / step_seconds / (peak * num_devices)
