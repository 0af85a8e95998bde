"""Find, count and forbid host synchronisations: the places where a tensor's value leaves the device.

A training step that stays on the GPU must never wait for the device to hand a value back to
Python (``.item()``, ``bool(t)``, ``.tolist()``, ``.cpu()``, a boolean-mask index, ``nonzero``:
anything whose result shape or Python value depends on the data). Each such call drains the CUDA
queue and leaves the GPU idle while the host catches up, and none of them can be captured in a CUDA
graph. Two detectors:

* :func:`forbid_host_syncs` / :func:`count_host_syncs` work on **any device, the CPU included**, so
  a machine without a GPU can still prove the hot path clean. The tensor methods that leave the
  device (:data:`PATCHED`) are patched, and a ``TorchDispatchMode`` sees the aten ops that sync
  (:data:`SYNC_OPS`, and indexing with a boolean mask, whose kernel calls ``nonzero`` without
  dispatching it again). ``Tensor.to("cpu")`` of a CPU tensor is invisible here (nothing is
  dispatched for it); on a GPU it is what :func:`cuda_sync_guard` sees.
* :func:`cuda_sync_guard` is the GPU's own check, ``torch.cuda.set_sync_debug_mode``.

Both attribute each sync to the code that asked for it: the first frame outside this module and
outside the *transparent* libraries (torch, NumPy: ``np.asarray(t)`` calls ``t.numpy``, the caller
is whoever called NumPy). A sync is **allowed** when, walking outwards from the innermost frame,
a frame of an allowed module (a name prefix, :data:`ENV_SYNC_POINTS` for the env) is met before
that asker. So ``"robolearn.envs.sync"`` allows the env's documented sync points, and
``"torch.optim"`` allows what the optimiser itself reads (Adam's CPU path reads its step counter;
on CUDA with ``capturable=True`` it does not), while an ``.item()`` written in an agent is still
the agent's.

Usage::

    with count_host_syncs() as profile:
        run_one_iteration()
    log.info(profile.format())         # every site with its count, the worst first

    with forbid_host_syncs(allowed=ENV_SYNC_POINTS):
        run_one_iteration()            # raises HostSync naming the first other sync

The CPU detectors patch ``torch.Tensor`` for the duration of the block (every thread sees the
patch; only the entering thread's calls are checked): use them in tests and profiling, never in
a training run.
"""

from __future__ import annotations

import sys
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ENV_SYNC_POINTS: tuple[str, ...] = ("robolearn.sim.", "robolearn.envs.sync")
"""The modules that may leave the device on the env's step path: the simulation backend (below
the ``SimBackend`` boundary) and the env's one place for documented host syncs."""

TRANSPARENT: tuple[str, ...] = ("torch", "numpy", "contextlib", "functools", "warnings", "_py_warnings")
"""Top-level packages skipped when looking for the code that asked for a sync."""

PATCHED: tuple[str, ...] = (
    "numpy", "cpu", "item", "tolist", "__bool__", "__int__", "__float__", "__index__", "__format__", "__repr__",
)
"""``torch.Tensor`` methods that hand a value to the host."""

SYNC_OPS: tuple[str, ...] = (
    "_local_scalar_dense", "nonzero", "nonzero_numpy", "argwhere", "masked_select", "unique", "_unique",
    "_unique2", "unique_dim", "unique_consecutive", "equal", "repeat_interleave", "bincount",
)
"""aten ops whose output shape or Python result depends on the data (``repeat_interleave`` syncs
unless given ``output_size``, ``bincount`` unless given ``minlength`` large enough; both are
reported either way)."""

_MASK_INDEX_OPS = frozenset({"index", "index_put", "index_put_", "_index_put_impl_"})
_CUDA_SYNC_MESSAGE = "synchronizing CUDA operation"


class HostSync(AssertionError):
    """A host synchronisation where none is allowed; the message names the op and its caller."""


@dataclass(frozen=True)
class SyncSite:
    """Where a host sync was asked for."""

    what: str
    """The op: ``Tensor.item``, ``aten.nonzero``, ``aten.index with a boolean mask``, ``cuda``."""
    module: str
    """The asking module (``?`` when no frame outside torch and this module was found)."""
    function: str
    """The asking function's name."""
    filename: str
    """The asking frame's file."""
    lineno: int
    """The asking frame's line."""
    allowed: bool
    """Whether an allowed module was on the stack before the asker."""

    def __str__(self) -> str:
        """``what`` at ``module.function`` (``file:line``)."""
        return f"{self.what} from {self.module}.{self.function} ({self.filename}:{self.lineno})"


@dataclass
class SyncProfile:
    """The syncs seen inside one guarded block, in the order they happened."""

    records: list[SyncSite] = field(default_factory=list)
    """Every sync, allowed or not."""

    @property
    def count(self) -> int:
        """Number of syncs (allowed included)."""
        return len(self.records)

    def forbidden(self) -> list[SyncSite]:
        """The syncs no allowed module accounts for."""
        return [r for r in self.records if not r.allowed]

    def by_site(self) -> list[tuple[SyncSite, int]]:
        """Each distinct site with the number of syncs it asked for, the most frequent first."""
        return Counter(self.records).most_common()

    def format(self) -> str:
        """One line per site: count, allowed or not, op, asker and its file and line."""
        lines = [f"{n:6d}  {'allowed  ' if site.allowed else 'FORBIDDEN'}  {site}" for site, n in self.by_site()]
        return "\n".join(lines) if lines else "no host syncs"


def _site(what: str, frame: FrameType | None, allowed: tuple[str, ...], transparent: tuple[str, ...]) -> SyncSite:
    """Attribute a sync to its asker, walking outwards from ``frame``."""
    is_allowed = False
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name.startswith(allowed):
            is_allowed = True
        if name != __name__ and name.split(".")[0] not in transparent:
            code = frame.f_code
            return SyncSite(what, name, code.co_name, code.co_filename, frame.f_lineno, is_allowed)
        frame = frame.f_back
    return SyncSite(what, "?", "?", "?", 0, is_allowed)


class _Guard:
    """One active detector: what it allows, whether it raises, and its profile."""

    def __init__(self, allowed: Iterable[str], raises: bool, transparent: Iterable[str]) -> None:
        self.allowed = tuple(allowed)
        self.transparent = tuple(transparent)
        self.raises = raises
        self.profile = SyncProfile()
        self.thread = threading.get_ident()

    def report(self, what: str, frame: FrameType | None) -> None:
        site = _site(what, frame, self.allowed, self.transparent)
        self.profile.records.append(site)
        if self.raises and not site.allowed:
            raise HostSync(f"host sync: {site}")


_active: list[_Guard] = []
"""The detectors now entered (outermost first); the patch and the dispatch mode are installed once."""
_state = threading.local()
"""``inside``: a patched method is running (its own dispatches are not reported a second time)."""
_originals: dict[str, Callable[..., Any]] = {}


def _report(what: str) -> None:
    frame = sys._getframe(1)  # this module's frames are skipped by _site
    me = threading.get_ident()
    for guard in list(_active):
        if guard.thread == me:
            guard.report(what, frame)


def _patched(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    def guarded(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if getattr(_state, "inside", False):
            return original(self, *args, **kwargs)
        _report(f"Tensor.{name}")
        _state.inside = True
        try:
            return original(self, *args, **kwargs)
        finally:
            _state.inside = False

    guarded.__name__ = name
    return guarded


class _SyncOps(TorchDispatchMode):
    """Reports the host-syncing aten ops to the active detectors."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if not getattr(_state, "inside", False):
            name = func.overloadpacket.__name__
            if name in SYNC_OPS:
                _report(f"aten.{name}")
            elif name in _MASK_INDEX_OPS and len(args) > 1 and any(
                isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in args[1]
            ):
                # A boolean-mask index: its kernel runs nonzero without dispatching it again.
                _report(f"aten.{name} with a boolean mask")
        return func(*args, **(kwargs or {}))


@contextmanager
def _detect(allowed: Iterable[str], raises: bool, transparent: Iterable[str]) -> Iterator[SyncProfile]:
    guard = _Guard(allowed, raises, transparent)
    outermost = not _active
    if outermost:
        for name in PATCHED:
            _originals[name] = getattr(torch.Tensor, name)
            setattr(torch.Tensor, name, _patched(name, _originals[name]))
    _active.append(guard)
    try:
        if outermost:
            with _SyncOps():
                yield guard.profile
        else:
            yield guard.profile
    finally:
        _active.remove(guard)
        if outermost:
            for name, original in _originals.items():
                setattr(torch.Tensor, name, original)
            _originals.clear()


@contextmanager
def count_host_syncs(
    allowed: Iterable[str] = ENV_SYNC_POINTS, transparent: Iterable[str] = TRANSPARENT
) -> Iterator[SyncProfile]:
    """Record every host sync in the block (on any device) into the yielded :class:`SyncProfile`;
    raise nothing. ``allowed`` only marks sites (``SyncSite.allowed``); ``transparent`` names the
    top-level packages whose frames are skipped when looking for the asker.
    """
    with _detect(allowed, False, transparent) as profile:
        yield profile


@contextmanager
def forbid_host_syncs(
    allowed: Iterable[str] = ENV_SYNC_POINTS, transparent: Iterable[str] = TRANSPARENT
) -> Iterator[SyncProfile]:
    """Raise :class:`HostSync` at the first host sync in the block (on any device) that no module of
    ``allowed`` accounts for (see the module docstring); the yielded profile records the allowed ones.
    """
    with _detect(allowed, True, transparent) as profile:
        yield profile


@contextmanager
def _attributed_sync_warnings(allowed: Iterable[str], transparent: Iterable[str]) -> Iterator[SyncProfile]:
    """Record each "synchronizing CUDA operation" warning (``set_sync_debug_mode("warn")``) with its
    asker into the yielded profile instead of printing it; other warnings pass through.
    """
    allowed, transparent = tuple(allowed), tuple(transparent)
    profile = SyncProfile()
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # one record per sync, not one per source line
        shown = warnings.showwarning

        def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
            if _CUDA_SYNC_MESSAGE in str(message):
                # torch emits the warning as its binding returns, while the asker's frame is current.
                profile.records.append(_site("cuda", sys._getframe(1), allowed, transparent))
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield profile


@contextmanager
def cuda_sync_guard(
    allowed: Iterable[str] = (), transparent: Iterable[str] = TRANSPARENT, raises: bool = True
) -> Iterator[SyncProfile]:
    """The GPU check: ``torch.cuda.set_sync_debug_mode`` over the block, restored on exit.

    Without ``allowed`` (and with ``raises``) this is plain ``"error"`` mode: the first synchronising
    CUDA call raises ``RuntimeError`` where it happens. With ``allowed`` (or ``raises=False``) the
    mode is ``"warn"`` and each warning is attributed to its asker like the CPU detectors do; at
    the end of the block :class:`HostSync` lists the syncs that no allowed module accounts for
    (when ``raises``). The yielded profile holds every sync seen in ``"warn"`` mode.

    Raises ``RuntimeError`` where CUDA is not available.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("cuda_sync_guard: CUDA is not available (use forbid_host_syncs on the CPU)")
    allowed = tuple(allowed)
    transparent = tuple(transparent)
    previous = torch.cuda.get_sync_debug_mode()
    if not allowed and raises:
        torch.cuda.set_sync_debug_mode("error")
        try:
            yield SyncProfile()
        finally:
            torch.cuda.set_sync_debug_mode(previous)
        return
    with _attributed_sync_warnings(allowed, transparent) as profile:
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield profile
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    bad = profile.forbidden()
    if raises and bad:
        sites = "\n".join(f"  {n} x {site}" for site, n in Counter(bad).most_common())
        raise HostSync(f"{len(bad)} host syncs outside {allowed}:\n{sites}")


__all__ = [
    "ENV_SYNC_POINTS",
    "HostSync",
    "SyncProfile",
    "SyncSite",
    "count_host_syncs",
    "cuda_sync_guard",
    "forbid_host_syncs",
]
