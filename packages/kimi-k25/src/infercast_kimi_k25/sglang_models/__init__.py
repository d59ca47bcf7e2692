"""``SGLANG_EXTERNAL_MODEL_PACKAGE=infercast_kimi_k25.sglang_models``: sglang imports every
module here and registers each module's ``EntryClass``. Importing this package needs sglang."""
