"""Package layout: the design card's top-level folders install under the ``robolearn`` namespace.

``tasks/``, ``sim2real/``, ``assets/`` and ``configs/`` become ``robolearn.tasks`` and so on
(DESIGN.md, "Layout"), so no generic top-level name lands in site-packages. The package list is
computed here because a static ``pyproject.toml`` cannot rename discovered sub-packages.
"""

from setuptools import find_packages, setup

MAPPED = {
    "robolearn.tasks": "tasks",
    "robolearn.sim2real": "sim2real",
    "robolearn.assets": "assets",
    "robolearn.configs": "configs",
}

packages = find_packages(include=["robolearn", "robolearn.*"])
for namespace, folder in MAPPED.items():
    packages += [namespace] + [f"{namespace}.{sub}" for sub in find_packages(folder)]

setup(packages=packages, package_dir={"robolearn": "robolearn", **MAPPED})
