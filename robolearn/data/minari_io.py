"""Minari datasets from and to a local Minari root; nothing here ever downloads.

The root is the explicit ``root`` argument, else ``$MINARI_DATASETS_PATH``, else Minari's own
default ``~/.minari/datasets``; a dataset ``ns/name-v0`` lives in ``<root>/ns/name-v0/data``. A
dataset missing there is an error telling the user to fetch it first (``minari download``).

Mapping. A Minari episode holds ``T + 1`` observations (the last is the observation after the
final step), ``T`` actions, rewards, ``terminations`` and ``truncations``: the first T rows
become our transitions, the last our ``final_observations``, terminations our ``terminals`` and
truncations our ``timeouts``. A Box observation space is the ``policy`` group; a Dict space maps
its keys to groups (directly, or through ``group_map``). Per-step ``infos`` of length ``T + 1``
(Minari's collector records the reset info first) keep their first T rows, so ``infos[t]`` goes
with ``observations[t]``; length-T infos are taken as they are.

Export writes Minari's HDF5 storage with ``jpeg_encoding=False`` (lossless), our metadata as JSON
under the ``robolearn_metadata`` key (so :func:`read_minari` restores it exactly) and the reference
returns as Minari's ``ref_min_score`` / ``ref_max_score``. Image groups (uint8 frames) become
uint8 ``Box(0, 255, frame_shape)`` spaces, which Minari's format allows; they are written raw
(``jpeg_encoding=False``, so the round trip is bit-exact, in either dimension order; Minari's own
collector JPEG-encodes images by default, which is lossy: :func:`read_minari` then sets
``metadata.extra["minari"]["jpeg_encoding"] = True``) and their
:class:`~robolearn.data.dataset.ImageLayout` goes under the ``robolearn_image_layouts`` key. Minari
stores ``T + 1`` frames per episode in one array, so frames read on demand
(:class:`~robolearn.data.dataset.FrameSource`) are read one episode at a time while exporting. The dataset directory is built under a
staging name beside its target (:mod:`robolearn.data.staging`) and renamed into place, so a failed
export leaves no dataset directory, complete or partial (only the namespace folders it created,
empty); one left by a killed export is removed by the next export of the same id.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch

from robolearn.data.dataset import Dataset, DatasetMetadata, ImageLayout
from robolearn.data.staging import staging_path, sweep_stale
from robolearn.data.validation import DatasetError
from robolearn.types import OBS_GROUPS

_META_KEY = "robolearn_metadata"
_LAYOUT_KEY = "robolearn_image_layouts"

_MINARI_ERRORS = (OSError, ValueError, KeyError, TypeError, AttributeError, AssertionError)
"""What Minari raises on a damaged dataset directory (it does not wrap h5py's, json's or its own)."""


def _minari() -> Any:
    try:
        import minari
    except ImportError as e:  # an optional extra: pip install "robolearn[data]"
        raise ImportError("Minari support needs the minari package: pip install 'robolearn[data]'") from e
    return minari


def minari_root(root: str | Path | None = None) -> Path:
    """The local Minari root: ``root``, else ``$MINARI_DATASETS_PATH``, else ``~/.minari/datasets``."""
    if root is not None:
        return Path(root)
    env = os.environ.get("MINARI_DATASETS_PATH")
    return Path(env) if env else Path.home() / ".minari" / "datasets"


def _flatten(prefix: str, tree: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    for k, v in tree.items():
        key = f"{prefix}/{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            yield from _flatten(key, v)
        else:
            yield key, v


def read_minari(
    dataset_id: str,
    *,
    root: str | Path | None = None,
    device: str | torch.device = "cpu",
    expect_obs_dim: int | Mapping[str, int] | None = None,
    expect_action_dim: int | None = None,
    task_id: str | None = None,
    group_map: Mapping[str, str] | None = None,
    infos: bool = True,
) -> Dataset:
    """Read Minari dataset ``dataset_id`` from a local root (never downloading), validated, onto ``device``.

    ``group_map`` renames the keys of a Dict observation space to observation groups (e.g.
    ``{"observation": "policy"}``); ``infos=False`` skips per-step infos. The task id comes from
    the dataset's environment spec when it has one.
    """
    minari = _minari()
    base = minari_root(root)
    data_path = base / dataset_id / "data"
    if not (data_path / "metadata.json").is_file():
        raise FileNotFoundError(
            f"Minari dataset {dataset_id!r} not found under the local root {base} (looked for {data_path}); "
            f"robolearn never downloads: fetch it first (`minari download {dataset_id}`) or pass root="
        )
    main = data_path / "main_data.hdf5"
    if main.is_file() and not h5py.is_hdf5(main):
        # Minari would fail at the first episode with h5py's words and no file name.
        raise DatasetError(f"{dataset_id}: {main} is not a readable HDF5 file")
    try:
        mds = minari.MinariDataset(str(data_path))
    except _MINARI_ERRORS as e:  # Minari's own checks of its metadata, or a metadata.json it cannot parse
        raise DatasetError(f"{dataset_id}: Minari cannot open {data_path} ({type(e).__name__}: {e})") from e
    raw_meta = mds.storage.metadata
    mapping = dict(group_map or {})

    def groups(obs: Any, e: int) -> dict[str, Any]:
        if isinstance(obs, Mapping):
            out = {mapping.get(k, k): v for k, v in obs.items()}
            unknown = sorted(set(out) - set(OBS_GROUPS))
            if unknown:  # e.g. goal-conditioned "observation"/"desired_goal" keys
                raise DatasetError(
                    f"observations: Dict keys {unknown} of {dataset_id!r} are not observation groups "
                    f"{list(OBS_GROUPS)}; map them with group_map (e.g. {{'observation': 'policy'}})"
                )
            return out
        if isinstance(obs, (tuple, list)):
            raise DatasetError(f"episode {e}: observations: Tuple observation spaces are not supported")
        return {mapping.get("policy", "policy"): obs}

    def minari_episodes() -> Iterator[Any]:
        # Only Minari's own reading is translated; errors of ours raised below pass unchanged.
        it = iter(mds.iterate_episodes())
        while True:
            try:
                ep = next(it)
            except StopIteration:
                return
            except _MINARI_ERRORS as err:
                raise DatasetError(
                    f"{dataset_id}: Minari cannot read the episodes in {data_path} ({type(err).__name__}: {err})"
                ) from err
            yield ep

    def episodes() -> Iterator[dict[str, Any]]:
        for e, ep in enumerate(minari_episodes()):
            t = len(ep.rewards)
            ep_infos: dict[str, Any] = {}
            for k, v in _flatten("", ep.infos or {}) if infos else ():
                arr = np.asarray(v)
                if arr.ndim == 0 or len(arr) not in (t, t + 1):
                    raise DatasetError(
                        f"episode {e}: infos/{k}: expected {t} or {t + 1} rows (one per step), got "
                        f"{'a scalar' if arr.ndim == 0 else len(arr)}; pass infos=False to skip infos"
                    )
                ep_infos[k] = arr[:t]
            yield {
                "observations": groups(ep.observations, e),
                "actions": ep.actions,
                "rewards": ep.rewards,
                "terminals": ep.terminations,
                "timeouts": ep.truncations,
                "infos": ep_infos,
            }

    if _META_KEY in raw_meta:
        metadata = DatasetMetadata.from_json(str(raw_meta[_META_KEY]))
    else:
        spec = mds.env_spec
        metadata = DatasetMetadata(
            task_id=spec.id if spec is not None else "",
            collection=str(raw_meta.get("algorithm_name") or ""),
            ref_random_return=raw_meta.get("ref_min_score"),
            ref_expert_return=raw_meta.get("ref_max_score"),
            robolearn_version="",
            source="minari",
            extra={
                "minari": {
                    k: raw_meta[k]
                    for k in ("dataset_id", "minari_version", "description", "code_permalink")
                    if raw_meta.get(k) is not None
                }
            },
        )
    layouts: dict[str, Any] | None = None
    if _LAYOUT_KEY in raw_meta:
        try:
            layouts = {
                mapping.get(k, k): ImageLayout.from_dict(v)
                for k, v in json.loads(str(raw_meta[_LAYOUT_KEY])).items()
            }
        except (json.JSONDecodeError, AttributeError) as e:
            raise DatasetError(f"{dataset_id}: unreadable {_LAYOUT_KEY} in its metadata ({e})") from e
    dataset = Dataset.from_episodes(episodes(), metadata=metadata, image_layouts=layouts)
    if dataset.image_layouts and raw_meta.get("jpeg_encoding") and _META_KEY not in raw_meta:
        # Minari's collector JPEG-encodes image spaces by default: the frames read are close to what
        # was observed, not equal to it, and whoever trains on them should be able to see that.
        dataset.metadata.extra.setdefault("minari", {})["jpeg_encoding"] = True
    dataset.check(expect_obs_dim=expect_obs_dim, expect_action_dim=expect_action_dim, task_id=task_id)
    if task_id and not dataset.metadata.task_id:
        dataset.metadata.task_id = task_id
    return dataset.to(device)


def _box(t: torch.Tensor) -> Any:
    import gymnasium as gym

    if t.dtype == torch.uint8:
        return gym.spaces.Box(0, 255, tuple(t.shape[1:]), np.uint8)
    # Bounds are not part of a dataset; an unbounded Box states exactly what is known.
    return gym.spaces.Box(-np.inf, np.inf, tuple(t.shape[1:]), np.float32)


def export_minari(
    dataset: Dataset,
    dataset_id: str,
    *,
    root: str | Path | None = None,
    author: str | None = None,
    code_permalink: str | None = None,
    description: str | None = None,
) -> Path:
    """Write ``dataset`` as Minari dataset ``dataset_id`` (``(namespace/)name-v<version>``) under a
    local root so that ``minari.load_dataset(dataset_id)`` (with that root) reads it; return its directory.

    One observation group gives a Box observation space, several a Dict space keyed by group.
    A dataset carrying a full ``next_observations`` array cannot be exported losslessly (Minari
    stores one observation sequence per episode) and raises.
    """
    minari = _minari()
    from minari.data_collector.episode_buffer import EpisodeBuffer
    from minari.dataset.minari_dataset import parse_dataset_id
    from minari.dataset.minari_storage import MinariStorage

    if dataset.next_observations is not None:
        raise DatasetError(
            "next_observations: Minari stores one observation sequence per episode; this dataset's next "
            "observations differ from the following rows, so it cannot be exported without loss"
        )
    try:
        parse_dataset_id(dataset_id)
    except ValueError as e:
        raise DatasetError(f"dataset_id: {e}") from e
    target = minari_root(root) / dataset_id
    if target.exists():
        raise FileExistsError(f"{target}: a Minari dataset {dataset_id!r} already exists there")
    target.parent.mkdir(parents=True, exist_ok=True)

    import gymnasium as gym

    cpu = dataset.to("cpu")
    single = list(cpu.observations) == ["policy"]
    obs_space = (
        _box(cpu.observations["policy"])
        if single
        else gym.spaces.Dict({k: _box(v) for k, v in cpu.observations.items()})
    )

    def buffers() -> Iterator[Any]:
        for e in range(cpu.num_episodes):
            ep = cpu.episode(e)
            obs = {k: v.numpy() for k, v in ep["observations"].items()}
            infos: dict[str, Any] = {}
            for k, v in ep["infos"].items():  # "a/b" names nest back into dicts
                node = infos
                *parents, leaf = k.split("/")
                for p in parents:
                    node = node.setdefault(p, {})
                node[leaf] = v.numpy()
            yield EpisodeBuffer(
                id=e,
                observations=obs["policy"] if single else obs,
                actions=ep["actions"].numpy(),
                rewards=ep["rewards"].numpy(),
                terminations=ep["terminals"].numpy(),
                truncations=ep["timeouts"].numpy(),
                infos=infos or None,
            )

    meta = dataset.metadata
    minari_meta: dict[str, Any] = {
        "dataset_id": dataset_id,
        "minari_version": minari.__version__,
        _META_KEY: meta.to_json(),
        "algorithm_name": meta.collection or "unknown",
        "description": description
        or f"Exported by robolearn {meta.robolearn_version} from task {meta.task_id!r}.",
    }
    if cpu.image_layouts:
        minari_meta[_LAYOUT_KEY] = json.dumps(
            {k: v.to_dict() for k, v in cpu.image_layouts.items()}, sort_keys=True
        )
    if meta.ref_random_return is not None and meta.ref_expert_return is not None:
        minari_meta["ref_min_score"] = float(meta.ref_random_return)
        minari_meta["ref_max_score"] = float(meta.ref_expert_return)
    if author:
        minari_meta["author"] = {author}
    if code_permalink:
        minari_meta["code_permalink"] = code_permalink

    sweep_stale(target)
    tmp = staging_path(target)
    # os.mkdir applies the umask to 0o777, so the dataset directory gets the user's usual
    # permissions once renamed (mkdtemp's would be 0o700).
    os.mkdir(tmp)
    try:
        storage = MinariStorage.new(
            tmp / "data",
            observation_space=obs_space,
            action_space=gym.spaces.Box(-np.inf, np.inf, (cpu.action_dim,), np.float32),
            data_format="hdf5",
            jpeg_encoding=False,
        )
        storage.update_metadata(minari_meta)
        storage.update_episodes(buffers())
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target
