"""Policy export: ONNX/TorchScript with normalisation folded in, and the typed I/O manifest;
chunked generative policies export their sampler with the noise as an input (``chunked``); policies
with uint8 image inputs export with the images declared in the manifest (``vision``).
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
    image_groups,
    load_manifest,
    read_manifest,
    sha256_file,
)
from robolearn.export.vision import export_image_policy, image_policy_runner

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
    "export_image_policy",
    "export_policy",
    "image_groups",
    "image_policy_runner",
    "load_manifest",
    "read_manifest",
    "sha256_file",
]
