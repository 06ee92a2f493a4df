"""Peak FLOP/s of a device and model FLOPs utilisation (MFU).

The model FLOPs of a step come from the task (counted by jaxtrans.models.model_flops).
"""

import jax

# Dense peak FLOP/s per device for the usual training dtype (bfloat16), from vendor specs.
PEAK_FLOPS = {
    "TPU v2": 45e12,
    "TPU v3": 123e12,
    "TPU v4": 275e12,
    "TPU v5 lite": 197e12,
    "TPU v5e": 197e12,
    "TPU v5p": 459e12,
    "TPU v6 lite": 918e12,
    "TPU v6e": 918e12,
    "A100": 312e12,
    "H100": 989e12,
    "H200": 989e12,
    "B200": 2250e12,
    "L4": 121e12,
    "V100": 125e12,
}


def device_peak_flops(override: float = 0.0) -> float | None:
    """Peak FLOP/s of one local device: ``override`` if set, else the table, else None."""
    if override:
        return float(override)
    kind = jax.devices()[0].device_kind
    for name, peak in PEAK_FLOPS.items():
        if name.lower() in kind.lower():
            return peak
    return None


def mfu(
    step_flops: float, step_seconds: float, num_devices: int, peak: float | None
) -> float | None:
    """Achieved model FLOP/s as a fraction of the devices' peak (None when the peak is unknown)."""
    if not peak or step_seconds <= 0:
        return None
    return step_flops / step_seconds / (peak * num_devices)
