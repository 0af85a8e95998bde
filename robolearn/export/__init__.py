"""Policy export: ONNX/TorchScript with normalisation folded in, and the typed I/O manifest;
chunked generative policies export their sampler with the noise as an input (``chunked``).
"""

from robolearn.export.chunked import chunk_runner, export_chunk_policy, export_generative
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
    "chunk_runner",
    "export_chunk_policy",
    "export_generative",
    "export_policy",
    "load_manifest",
    "read_manifest",
    "sha256_file",
]
