"""Policy export: ONNX/TorchScript with normalisation folded in, and the typed I/O manifest."""

from robolearn.export.exporter import (
    FORMATS,
    MANIFEST_VERSION,
    Artifact,
    ExportError,
    ExportManifest,
    build_manifest,
    export_policy,
    load_manifest,
    read_manifest,
    sha256_file,
)

__all__ = [
    "FORMATS",
    "MANIFEST_VERSION",
    "Artifact",
    "ExportError",
    "ExportManifest",
    "build_manifest",
    "export_policy",
    "load_manifest",
    "read_manifest",
    "sha256_file",
]
