"""Device memory by device name, for ``remat.fit`` and ``remat fit --device-memory``: a table
of its own so that the command line lists the names without importing torch."""

from __future__ import annotations

MiB = 2**20

# device memory as CUDA reports it (nvidia-smi's total), by name; lookups ignore case, spaces,
# "-" and "_"; the first name of a row is the one reports show
DEVICES: dict[str, int] = {
    "H100": 81559 * MiB,            # H100 80GB (SXM and PCIe)
    "H100-NVL": 95830 * MiB,
    "H200": 143771 * MiB,
    "GH200": 97871 * MiB,
    "B200": 183359 * MiB,
    "A100-80GB": 81920 * MiB,
    "A100": 40960 * MiB,            # A100 40GB
    "A100-40GB": 40960 * MiB,
    "A10G": 23028 * MiB,
    "A10": 23028 * MiB,
    "L4": 23034 * MiB,
    "L40S": 46068 * MiB,
    "V100": 16384 * MiB,
    "V100-32GB": 32768 * MiB,
    "T4": 15360 * MiB,
    "RTX4090": 24564 * MiB,
    "RTX3090": 24576 * MiB,
    "MI300X": 196592 * MiB,
}
