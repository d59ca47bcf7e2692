"""Device profiles: specification numbers with units in their names, each with a source.

Peaks are dense (not sparse) tensor-core figures from the vendors' data sheets, collected in
the project's reference notes (shared/reference/devices.md). Efficiencies and fixed costs are
not specifications; they are marked ``calibrated`` and say how they were obtained.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

from infercast_adapters import InfercastError

GB = 1e9
GIB = 2**30
TB = 1e12
TIB = 2**40
T = 1e12


@dataclass(frozen=True)
class Calibration:
    """Efficiencies and fixed costs that no data sheet gives, with how each was obtained."""

    gemm_efficiency: float
    """Achieved / peak tensor throughput on large GEMMs."""
    memory_efficiency: float
    """Achieved / peak HBM bandwidth on streaming kernels."""
    kernel_fixed_s: float
    """Time every kernel costs on top of its roofline time (launch gap + ramp-up and tail)."""
    link_efficiency: float
    """Achieved / peak scale-up link bandwidth for large collectives."""
    source: str


HOPPER_CALIBRATION = Calibration(
    gemm_efficiency=0.81,
    memory_efficiency=0.90,
    kernel_fixed_s=4e-6,
    link_efficiency=0.80,
    source=(
        "gemm 0.81: an 8192^3 bf16 matmul ran at 798 TFLOP/s of 989 on an H100 SXM (769-798 on H200); "
        "memory 0.90: device-to-device copy moved 3.0 TB/s of 3.35 on H100 and 4.3 of 4.8 on H200 "
        "(PyTorch 2.11, shared/reference/devices.md). kernel 4 us: an engineering estimate, ~1 us "
        "inter-kernel gap under CUDA graphs plus ~3 us minimum duration of a small kernel; not fitted "
        "to any reference point. link 0.80: typical NCCL bus bandwidth / NVLink peak, an estimate."
    ),
)

ASSUMED_FROM_HOPPER = replace(
    HOPPER_CALIBRATION,
    source="not measured on this device: the Hopper calibration is assumed. " + HOPPER_CALIBRATION.source,
)


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator and the machine it sits in."""

    name: str
    peak_flops_per_s: Mapping[str, float]
    """Dense tensor peaks by compute dtype: ``bf16``, ``fp16``, ``fp8``, ``int8``, ``fp4``."""
    memory_bytes: float
    hbm_bandwidth_bytes_per_s: float
    scale_up_bandwidth_bytes_per_s: float
    """Per device, one direction, inside the scale-up domain (NVLink, Infinity Fabric, HCCS)."""
    scale_up_latency_s: float
    """One synchronisation step of a collective inside the scale-up domain (calibrated estimate)."""
    scale_out_bandwidth_bytes_per_s: float
    """Per device, one direction, between nodes (e.g. 400 Gb/s InfiniBand = 50 GB/s)."""
    scale_out_latency_s: float
    devices_per_node: int
    calibration: Calibration
    sources: Mapping[str, str] = field(default_factory=dict)
    super_node_size: int | None = None
    """Devices in one scale-up domain beyond a node (Ascend CloudMatrix384), when enabled."""
    aliases: tuple[str, ...] = ()

    def peak(self, dtype: str) -> float:
        """Peak for a compute dtype, falling back to the nearest wider type the device has
        (a W4A8 GEMM on a device without int8 peaks runs at its fp8 or bf16 rate)."""
        fallbacks = {"fp4": ("fp4", "fp8", "int8", "bf16"), "fp8": ("fp8", "bf16"), "int8": ("int8", "fp8", "bf16"),
                     "fp16": ("fp16", "bf16"), "bf16": ("bf16", "fp16")}
        for candidate in fallbacks.get(dtype, (dtype,)):
            if candidate in self.peak_flops_per_s:
                return self.peak_flops_per_s[candidate]
        raise InfercastError(f"{self.name}: no published peak for compute dtype {dtype!r}")

    def scale_up_domain(self, super_node: bool = False) -> int:
        return self.super_node_size if super_node and self.super_node_size else self.devices_per_node

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "peak_tflops": {k: v / T for k, v in self.peak_flops_per_s.items()},
            "memory_gb": self.memory_bytes / GB,
            "hbm_bandwidth_tb_per_s": self.hbm_bandwidth_bytes_per_s / TB,
            "scale_up_bandwidth_gb_per_s": self.scale_up_bandwidth_bytes_per_s / GB,
            "scale_out_bandwidth_gb_per_s": self.scale_out_bandwidth_bytes_per_s / GB,
            "devices_per_node": self.devices_per_node,
            "super_node_size": self.super_node_size,
            "calibration": {
                "gemm_efficiency": self.calibration.gemm_efficiency,
                "memory_efficiency": self.calibration.memory_efficiency,
                "kernel_fixed_us": self.calibration.kernel_fixed_s * 1e6,
                "link_efficiency": self.calibration.link_efficiency,
                "source": self.calibration.source,
            },
            "sources": dict(self.sources),
        }


NVIDIA_SPEC = "NVIDIA data sheet (dense tensor-core peaks), via shared/reference/devices.md"
IB_400G = 400e9 / 8  # 400 Gb/s per GPU, the typical scale-out NIC

BUILTIN_DEVICES: tuple[DeviceSpec, ...] = (
    DeviceSpec(
        name="A100", aliases=("A100-SXM-80GB",),
        peak_flops_per_s={"bf16": 312 * T, "fp16": 312 * T, "int8": 624 * T},
        memory_bytes=80 * GB, hbm_bandwidth_bytes_per_s=2.04 * TB,
        scale_up_bandwidth_bytes_per_s=300 * GB, scale_up_latency_s=3e-6,
        scale_out_bandwidth_bytes_per_s=200e9 / 8, scale_out_latency_s=10e-6,
        devices_per_node=8, calibration=ASSUMED_FROM_HOPPER,
        sources={"peaks, memory, NVLink3": NVIDIA_SPEC, "scale-out": "200 Gb/s HDR per GPU, typical DGX A100"},
    ),
    DeviceSpec(
        name="H100", aliases=("H100-SXM", "H100-80GB"),
        peak_flops_per_s={"bf16": 989 * T, "fp16": 989 * T, "fp8": 1979 * T, "int8": 1979 * T},
        memory_bytes=80 * GB, hbm_bandwidth_bytes_per_s=3.35 * TB,
        scale_up_bandwidth_bytes_per_s=450 * GB, scale_up_latency_s=3e-6,
        scale_out_bandwidth_bytes_per_s=IB_400G, scale_out_latency_s=10e-6,
        devices_per_node=8, calibration=HOPPER_CALIBRATION,
        sources={"peaks, memory, NVLink4": NVIDIA_SPEC, "scale-out": "400 Gb/s per GPU typical"},
    ),
    DeviceSpec(
        name="H200", aliases=("H200-SXM", "H200-141GB"),
        peak_flops_per_s={"bf16": 989 * T, "fp16": 989 * T, "fp8": 1979 * T, "int8": 1979 * T},
        memory_bytes=141 * GB, hbm_bandwidth_bytes_per_s=4.8 * TB,
        scale_up_bandwidth_bytes_per_s=450 * GB, scale_up_latency_s=3e-6,
        scale_out_bandwidth_bytes_per_s=IB_400G, scale_out_latency_s=10e-6,
        devices_per_node=8, calibration=HOPPER_CALIBRATION,
        sources={"peaks, memory, NVLink4": NVIDIA_SPEC, "scale-out": "400 Gb/s per GPU typical"},
    ),
    DeviceSpec(
        name="H20", aliases=("H20-96G",),
        peak_flops_per_s={"bf16": 148 * T, "fp16": 148 * T, "fp8": 296 * T, "int8": 296 * T},
        memory_bytes=96 * GB, hbm_bandwidth_bytes_per_s=4.0 * TB,
        scale_up_bandwidth_bytes_per_s=450 * GB, scale_up_latency_s=3e-6,
        scale_out_bandwidth_bytes_per_s=IB_400G, scale_out_latency_s=10e-6,
        devices_per_node=8, calibration=ASSUMED_FROM_HOPPER,
        sources={"peaks, memory, NVLink": NVIDIA_SPEC, "scale-out": "400 Gb/s per GPU typical"},
    ),
    DeviceSpec(
        name="B200",
        peak_flops_per_s={"bf16": 2250 * T, "fp16": 2250 * T, "fp8": 4500 * T, "int8": 4500 * T, "fp4": 9000 * T},
        memory_bytes=180 * GB, hbm_bandwidth_bytes_per_s=8 * TB,
        scale_up_bandwidth_bytes_per_s=900 * GB, scale_up_latency_s=3e-6,
        scale_out_bandwidth_bytes_per_s=IB_400G, scale_out_latency_s=10e-6,
        devices_per_node=8, calibration=ASSUMED_FROM_HOPPER,
        sources={"peaks, memory, NVLink5": NVIDIA_SPEC, "scale-out": "400 Gb/s per GPU typical"},
    ),
    DeviceSpec(
        name="MI300X",
        peak_flops_per_s={"bf16": 1307 * T, "fp16": 1307 * T, "fp8": 2615 * T, "int8": 2615 * T},
        memory_bytes=192 * GB, hbm_bandwidth_bytes_per_s=5.3 * TB,
        scale_up_bandwidth_bytes_per_s=448 * GB, scale_up_latency_s=3e-6,
        scale_out_bandwidth_bytes_per_s=IB_400G, scale_out_latency_s=10e-6,
        devices_per_node=8, calibration=ASSUMED_FROM_HOPPER,
        sources={"peaks, memory, Infinity Fabric (aggregate)": "AMD data sheet, via shared/reference/devices.md"},
    ),
    DeviceSpec(
        name="ATLAS_800_A3_560T_128G_DIE",
        peak_flops_per_s={"bf16": 246 * T, "fp16": 280 * T, "int8": 560 * T},
        memory_bytes=64 * GIB, hbm_bandwidth_bytes_per_s=1.6 * TIB,
        scale_up_bandwidth_bytes_per_s=196 * GB, scale_up_latency_s=5e-6,
        scale_out_bandwidth_bytes_per_s=IB_400G, scale_out_latency_s=15e-6,
        devices_per_node=16, super_node_size=384, calibration=ASSUMED_FROM_HOPPER,
        sources={"peaks, memory, HCCS": "Huawei Atlas 800 A3 figures per die, via shared/reference/devices.md",
                 "node": "8 two-die chips = 16 dies per server; CloudMatrix384 super-node: 384 NPUs"},
    ),
    DeviceSpec(
        name="ATLAS_800_A3_752T_128G_DIE",
        peak_flops_per_s={"bf16": 354 * T, "fp16": 376 * T, "int8": 752 * T},
        memory_bytes=64 * GIB, hbm_bandwidth_bytes_per_s=1.6 * TIB,
        scale_up_bandwidth_bytes_per_s=196 * GB, scale_up_latency_s=5e-6,
        scale_out_bandwidth_bytes_per_s=IB_400G, scale_out_latency_s=15e-6,
        devices_per_node=16, super_node_size=384, calibration=ASSUMED_FROM_HOPPER,
        sources={"peaks, memory, HCCS": "Huawei Atlas 800 A3 figures per die, via shared/reference/devices.md",
                 "node": "8 two-die chips = 16 dies per server; CloudMatrix384 super-node: 384 NPUs"},
    ),
)


class DeviceRegistry:
    """Devices by name (case-insensitive, aliases included); plugins add more."""

    def __init__(self, devices: tuple[DeviceSpec, ...] = ()) -> None:
        self._devices: dict[str, DeviceSpec] = {}
        self._keys: dict[str, str] = {}
        for device in devices:
            self.add(device)

    def add(self, device: DeviceSpec) -> None:
        for key in (device.name, *device.aliases):
            if key.lower() in self._keys:
                raise InfercastError(f"device name {key!r} is already registered")
        self._devices[device.name] = device
        for key in (device.name, *device.aliases):
            self._keys[key.lower()] = device.name

    def get(self, name: str) -> DeviceSpec:
        key = self._keys.get(name.lower())
        if key is None:
            raise InfercastError(
                f"unknown device {name!r}. Valid devices: {', '.join(self.names())}. "
                "A plugin can add one with the infercast_register_devices hook."
            )
        return self._devices[key]

    def names(self) -> list[str]:
        return list(self._devices)

    def all(self) -> list[DeviceSpec]:
        return list(self._devices.values())
