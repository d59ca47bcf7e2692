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

from infercast.export.run import ExportRequest, ExportResult, PhaseResult, export_model

__all__ = ["ExportRequest", "ExportResult", "PhaseResult", "export_model"]
