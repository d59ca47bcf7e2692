"""The model view: the real transformers forward exported as static prefill and decode graphs
with an explicit KV cache (``infercast export``), and the pricing of such a graph
(``infercast simulate --from-ir``).

- :mod:`infercast.export.abi`: the prefill and decode interfaces (inputs, outputs, cache layout);
- :mod:`infercast.export.graph`: extraction with pytorch-ir, the completeness check, JSON I/O;
- :mod:`infercast.export.run`: the command: resolve, patch, build on meta, extract, write;
- :mod:`infercast.export.pricing`: an IR's ATen nodes priced with the simulator's cost model.

Nothing here imports :mod:`infercast.build`: the engine view and the model view share only the
adapters (config and class patches) and the cost machinery.
"""

PHASES = ("prefill", "decode", "both")
DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
"""``--dtype`` choices and the torch dtype each names (kept here so the command line can list
them without importing torch)."""

_LAZY = ("ExportRequest", "ExportResult", "PhaseResult", "export_model")


def __getattr__(name: str):
    if name in _LAZY:
        from infercast.export import run

        return getattr(run, name)
    raise AttributeError(f"module 'infercast.export' has no attribute {name!r}")


__all__ = ["DTYPE_NAMES", "PHASES", "ExportRequest", "ExportResult", "PhaseResult", "export_model"]
