"""The MFU's peak is found for each device_kind string the runtimes report, which are not
the product names (a v5p reports "TPU v5")."""

import pytest

from jaxtrans.training.mfu import device_peak_flops, mfu, peak_flops_of


# device_kind as jax reports it -> dense bf16 peak of one device, from the vendors' pages
# (Cloud TPU system architecture; NVIDIA's data sheets).
@pytest.mark.parametrize(
    "device_kind, peak",
    [
        ("TPU v2", 22.5e12),  # 45 TFLOP/s a chip, two devices a chip
        ("TPU v3", 61.5e12),  # 123 a chip, two devices
        ("TPU v4", 275e12),
        ("TPU v5 lite", 197e12),  # v5e
        ("TPU v5e", 197e12),
        ("TPU v5", 459e12),  # v5p
        ("TPU v5p", 459e12),
        ("TPU v6 lite", 918e12),  # v6e (Trillium)
        ("TPU v6e", 918e12),
        ("NVIDIA H100 80GB HBM3", 989e12),  # SXM
        ("NVIDIA H100 PCIe", 756e12),
        ("NVIDIA H100 NVL", 835e12),
        ("NVIDIA H200", 989e12),
        ("NVIDIA GH200 480GB", 989e12),
        ("NVIDIA A100-SXM4-80GB", 312e12),
        ("NVIDIA A100-SXM4-40GB", 312e12),
        ("NVIDIA A100-PCIE-40GB", 312e12),
        ("NVIDIA A100 80GB PCIe", 312e12),
        ("NVIDIA B200", 2250e12),
        ("NVIDIA L4", 121e12),
        ("Tesla V100-SXM2-16GB", 125e12),
    ],
)
def test_each_reported_device_kind_has_its_peak(device_kind, peak):
    assert peak_flops_of(device_kind) == peak
    assert peak_flops_of(device_kind.lower()) == peak


@pytest.mark.parametrize("device_kind", ["cpu", "TPU v4 lite", "TPU v7", "NVIDIA L40S", ""])
def test_a_device_the_table_does_not_know_has_no_peak(device_kind):
    # No guess from a name that merely contains a known one ("TPU v4 lite" is not a v4).
    assert peak_flops_of(device_kind) is None


def test_the_override_wins_and_this_cpu_has_no_peak():
    assert device_peak_flops(123.0) == 123.0
    assert device_peak_flops() is None  # the test machine's CPU


def test_mfu_is_the_share_of_the_devices_peak():
    assert mfu(8e12, 2.0, 4, 1e12) == pytest.approx(1.0)
    assert mfu(8e12, 2.0, 4, None) is None
