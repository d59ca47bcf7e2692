"""Turn a model reference into a transformers config.

The order follows the TensorCast configuration flow:

1. a path to a ``config.json`` or to a model directory holding one;
2. the adapters' :func:`~infercast_adapters.hookspecs.infercast_resolve_config` hook, so
   bundled architectures work offline;
3. a hub id through transformers ``AutoConfig``, where a hub is reachable;
4. when the native load fails, a retry with ``trust_remote_code=True``;
5. when the remote config reports a model_type transformers implements natively, or one an
   adapter names as an alias of a native type (:func:`~infercast_adapters.hookspecs.infercast_register_config_aliases`),
   a native reload of the same values.

``num_hidden_layers_override`` then shortens the language model.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from infercast_adapters.errors import ConfigError

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from infercast_adapters.manager import AdapterManager

class PlainConfig:
    """A model config as plain values: attribute access over a ``config.json`` dictionary, with
    ``text_config`` and ``vision_config`` as nested configs.

    What the engine view needs from a config is numbers, and importing transformers to hold
    them costs about 0.4 s before its config classes, 0.6 s with them. An adapter whose
    bundled architecture is complete (every field the simulator reads, with the values
    transformers' class would give) returns one of these from ``infercast_resolve_config``;
    :func:`to_transformers` turns it into the native config where a transformers model is built.
    A missing field raises AttributeError, as on a transformers config, so ``getattr`` defaults
    behave the same.
    """

    SUB_CONFIGS = ("text_config", "vision_config")

    def __init__(self, values: Mapping[str, Any]) -> None:
        for key, value in copy.deepcopy(dict(values)).items():
            if key in self.SUB_CONFIGS and isinstance(value, Mapping):
                value = PlainConfig(value)
            setattr(self, key, value)

    def to_dict(self) -> dict[str, Any]:
        """The values as a fresh nested dictionary (sub-configs included)."""
        return {key: value.to_dict() if isinstance(value, PlainConfig) else copy.deepcopy(value)
                for key, value in vars(self).items()}

    def __repr__(self) -> str:
        return f"PlainConfig({getattr(self, 'model_type', '?')!r}, {len(vars(self))} fields)"


def to_transformers(config: Any) -> PretrainedConfig:
    """The native transformers config for ``config``: itself when it already is one, else the
    reading of a :class:`PlainConfig`'s values by its model_type's config class."""
    if not isinstance(config, PlainConfig):
        return config
    return config_from_dict(config.to_dict(), source=f"{config.model_type} (plain config)")


def _config_mapping() -> Any:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return CONFIG_MAPPING


def native_model_type(model_type: str | None, aliases: Mapping[str, str] = {}) -> str | None:
    """The transformers-native model_type for ``model_type`` (through the adapters' ``aliases``),
    or None when there is none."""
    if not isinstance(model_type, str):
        return None
    model_type = aliases.get(model_type, model_type)
    return model_type if model_type in _config_mapping() else None


def config_from_dict(values: dict[str, Any], *, source: str = "config",
                     aliases: Mapping[str, str] = {}) -> PretrainedConfig:
    """Build a native transformers config from a ``config.json`` dictionary, reading a
    model_type in ``aliases`` as its native type.

    The user's dictionary is copied, never modified.
    """
    model_type = values.get("model_type")
    if not model_type:
        raise ConfigError(f"{source}: no 'model_type' field; a transformers config.json names its model_type")
    if not isinstance(model_type, str):
        raise ConfigError(f"{source}: model_type must be a string, got {type(model_type).__name__} {model_type!r}")
    native = native_model_type(model_type, aliases)
    if native is None:
        raise ConfigError(
            f"{source}: model_type {model_type!r} is not implemented by the installed transformers "
            "and has no native alias; pass a model directory with its remote code (auto_map) instead"
        )
    values = dict(values, model_type=native)
    try:
        return _config_mapping()[native].from_dict(values)
    except Exception as exc:  # transformers validates configs with several exception types
        raise ConfigError(f"{source}: not a valid {native} config: {type(exc).__name__}: {exc}") from exc


def _read_json(file: Path) -> dict[str, Any]:
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{file}: not UTF-8 text (byte {exc.start}); a config.json is UTF-8 JSON") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read {file}: {exc.strerror or exc}") from exc
    try:
        values = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{file}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from exc
    if not isinstance(values, dict):
        raise ConfigError(f"{file}: expected a JSON object, found {type(values).__name__}")
    return values


def _looks_like_path(model_ref: str) -> bool:
    return model_ref.endswith(".json") or model_ref.startswith((".", "/", "~")) or Path(model_ref).exists()


def load_local_config(path: str | Path, aliases: Mapping[str, str] = {}) -> PretrainedConfig:
    """Load a ``config.json`` file, or the one in a model directory (``aliases``: see
    :func:`config_from_dict`), with the tokenizer class its ``tokenizer_config.json`` names
    (:func:`with_tokenizer_class`)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise ConfigError(f"no such file or directory: {path}")
    file = path / "config.json" if path.is_dir() else path
    if path.is_dir() and not file.is_file():
        raise ConfigError(f"{path} is a directory without a config.json")
    if not file.is_file():
        raise ConfigError(f"{path} is not a regular file (a device or a pipe?); pass a config.json or a model directory")
    values = with_modelopt_quantization(_read_json(file), file.parent / "hf_quant_config.json")
    model_type = values.get("model_type")
    if isinstance(model_type, str) and native_model_type(model_type, aliases) is None and "auto_map" in values and path.is_dir():
        from transformers import AutoConfig

        try:
            remote = AutoConfig.from_pretrained(str(path), trust_remote_code=True)
        except Exception as exc:  # the directory's own code: any error it raises
            raise ConfigError(f"{path}: its auto_map code could not load the config ({type(exc).__name__}: {exc})") from exc
        config = _native_reload(remote, aliases) or remote
        if values.get("quantization_config") and not getattr(config, "quantization_config", None):
            config.quantization_config = values["quantization_config"]  # the folded hf_quant_config.json
    else:
        config = config_from_dict(values, source=str(file), aliases=aliases)
    tokenizer = file.parent / "tokenizer_config.json"
    return with_tokenizer_class(config, _read_json(tokenizer) if tokenizer.is_file() else {})


def with_modelopt_quantization(values: dict[str, Any], hf_quant_config: Path) -> dict[str, Any]:
    """``values`` with the ``hf_quant_config.json`` beside it as its ``quantization_config``
    (``quant_method`` ``modelopt``) where the config.json has none: NVIDIA ModelOpt checkpoints
    (nvidia/*-FP8, *-FP4) state their quantization only there, and vLLM and sglang read it."""
    if values.get("quantization_config") or not hf_quant_config.is_file():
        return values
    extra = _read_json(hf_quant_config)
    return {**values, "quantization_config": {"quant_method": "modelopt", **extra}}


def with_tokenizer_class(config: PretrainedConfig, tokenizer_config: Mapping[str, Any]) -> PretrainedConfig:
    """``config`` with the tokenizer class the checkpoint's ``tokenizer_config.json`` values name
    as its ``tokenizer_class``, ahead of any the config.json names, as transformers' AutoTokenizer
    reads them: Kimi-K2's checkpoints load as DeepSeek-V3 but tokenize with tiktoken."""
    name = tokenizer_config.get("tokenizer_class")
    if isinstance(name, str):
        config.tokenizer_class = name
    return config


def _hub_file(model_ref: str, name: str) -> Path | None:
    """The repository's file ``name`` from the hub (or its cache); None where the repository has
    no such file or the download fails."""
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(model_ref, name))
    except Exception:  # no such file in the repository, a failed download
        return None


def _hub_tokenizer_config(model_ref: str) -> dict[str, Any]:
    """The hub checkpoint's ``tokenizer_config.json`` values; empty where it has none or the
    download fails (the model family's tokenizer kind then stands)."""
    file = _hub_file(model_ref, "tokenizer_config.json")
    try:
        return _read_json(file) if file is not None else {}
    except ConfigError:  # a file that is not a JSON object
        return {}


def _native_reload(config: PretrainedConfig, aliases: Mapping[str, str]) -> PretrainedConfig | None:
    native = native_model_type(getattr(config, "model_type", None), aliases)
    if native is None:
        return None
    return config_from_dict(config.to_dict(), source=f"remote config {config.model_type!r}", aliases=aliases)


HUB_PROBE_TIMEOUT_S = 3.0


def hub_unreachable() -> str | None:
    """Why the model hub cannot be asked (``HF_HUB_OFFLINE`` set, or no TCP connection to its
    host within a few seconds), else None. Asked before a hub lookup, so an unreachable hub
    fails in seconds instead of after transformers' retries."""
    import os
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "").strip() not in ("", "0") or os.environ.get(
            "TRANSFORMERS_OFFLINE", "").strip() not in ("", "0"):
        return "HF_HUB_OFFLINE is set"
    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=HUB_PROBE_TIMEOUT_S).close()
    except OSError as exc:
        return f"{host}:{port} is not reachable ({exc.strerror or type(exc).__name__})"
    return None


def load_hub_config(model_ref: str, aliases: Mapping[str, str] = {}) -> PretrainedConfig:
    """Load from the hub: natively, else with remote code, reloading natively when possible; with
    the tokenizer class the repository's ``tokenizer_config.json`` names (:func:`with_tokenizer_class`)."""
    why = hub_unreachable()
    if why is not None:
        raise OSError(f"the model hub cannot be asked: {why}")
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(model_ref)
    except ValueError as native_error:  # unknown model_type, or remote code required
        try:
            remote = AutoConfig.from_pretrained(model_ref, trust_remote_code=True)
        except Exception as exc:
            raise ConfigError(
                f"{model_ref}: transformers could not load the config natively ({native_error}) "
                f"nor with trust_remote_code ({exc})"
            ) from exc
        config = _native_reload(remote, aliases) or remote
    if not getattr(config, "quantization_config", None):
        file = _hub_file(model_ref, "hf_quant_config.json")  # a ModelOpt checkpoint states its quantization there
        quantization = with_modelopt_quantization({}, file).get("quantization_config") if file else None
        if quantization:
            config.quantization_config = quantization
    return with_tokenizer_class(config, _hub_tokenizer_config(model_ref))


def apply_num_hidden_layers_override(config: PretrainedConfig, num_hidden_layers: int) -> None:
    """Shorten the language model (root config and ``text_config``) to ``num_hidden_layers``."""
    if not isinstance(num_hidden_layers, int) or num_hidden_layers < 1:
        raise ConfigError(f"num_hidden_layers_override must be a positive integer, got {num_hidden_layers!r}")
    targets = [config]
    text_config = getattr(config, "text_config", None)
    if text_config is not None:
        targets.append(text_config)
    for target in targets:
        if hasattr(target, "num_hidden_layers"):
            target.num_hidden_layers = num_hidden_layers
            layer_types = getattr(target, "layer_types", None)
            if isinstance(layer_types, list):
                target.layer_types = layer_types[:num_hidden_layers]
            mlp_only = getattr(target, "mlp_only_layers", None)
            if isinstance(mlp_only, list):
                target.mlp_only_layers = [i for i in mlp_only if i < num_hidden_layers]


def load_config(
    model_ref: str,
    *,
    manager: AdapterManager | None = None,
    num_hidden_layers_override: int | None = None,
    known_models: Iterable[str] = (),
) -> PretrainedConfig:
    """Resolve ``model_ref`` (a path, an adapter's reference, or a hub id) to a fresh config.

    :param manager: the adapter manager whose resolve hook is asked; None skips adapters.
    :param num_hidden_layers_override: keep only this many decoder layers.
    :param known_models: references to list in the error for an unknown model.
    :raises ConfigError: a missing path, unreadable or invalid JSON, or an unknown model.
    """
    if not isinstance(model_ref, str) or not model_ref.strip():
        raise ConfigError("no model given: pass a hub id, an alias, or a path to a config.json or model directory")
    aliases = manager.config_aliases() if manager is not None else {}
    if _looks_like_path(model_ref):
        config = load_local_config(model_ref, aliases)
    else:
        config = manager.resolve_config(model_ref) if manager is not None else None
        if config is None:
            try:
                config = load_hub_config(model_ref, aliases)
            except OSError as exc:
                raise ConfigError(_unknown_model_message(model_ref, manager, known_models, exc)) from exc
    if num_hidden_layers_override is not None:
        apply_num_hidden_layers_override(config, num_hidden_layers_override)
    return config


def _unknown_model_message(model_ref: str, manager: AdapterManager | None, known_models: Iterable[str], exc: Exception) -> str:
    model_types = sorted(manager.profiles()) if manager is not None else []
    lines = [
        f"unknown model {model_ref[:200]!r}{'...' if len(model_ref) > 200 else ''}: it is not a local path, no "
        f"installed adapter resolves it, and the hub could not provide it ({exc}).",
    ]
    known = sorted(set(known_models))
    if known:
        lines.append(f"Models available offline: {', '.join(known)}.")
    if model_types:
        lines.append(f"Model types with an adapter profile: {', '.join(model_types)}.")
    lines.append(
        "To add one, pass the path to its config.json (or model directory), or install an adapter "
        "plugin that implements infercast_resolve_config."
    )
    return " ".join(lines)
