"""Policy export: ONNX/TorchScript with normalisation folded in, and the I/O manifest."""

from robolearn.export.exporter import (
    FORMATS,
    ExportError,
    build_manifest,
    export_policy,
    load_manifest,
    sha256_file,
)

__all__ = ["FORMATS", "ExportError", "build_manifest", "export_policy", "load_manifest", "sha256_file"]
