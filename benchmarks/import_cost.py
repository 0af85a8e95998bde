"""What importing robolearn costs: wall time and modules loaded, each in a fresh interpreter.

    python benchmarks/import_cost.py [--repeats 7]

Measures ``import robolearn``, ``import robolearn.types``, ``import robolearn`` followed by the first
``robolearn.list_tasks()`` (the task families load then), and ``robolearn.load_policy``'s import
(``robolearn.runners.policy``), reporting the median wall time over ``--repeats`` interpreters,
the number of ``robolearn`` modules and of all modules, and whether the heavy ones (torch,
mujoco, gymnasium, hydra, the task families, the CLI) were loaded.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CASES: dict[str, str] = {
    "import robolearn": "import robolearn",
    "import robolearn.types": "import robolearn.types",
    "import robolearn.runners.policy": "import robolearn.runners.policy",
    "import robolearn; list_tasks()": "import robolearn; robolearn.list_tasks()",
}
HEAVY = ("torch", "mujoco", "gymnasium", "hydra", "robolearn.tasks", "robolearn.cli")

PROBE = """
import json, sys, time
t = time.perf_counter()
{code}
dt = time.perf_counter() - t
mods = list(sys.modules)
print(json.dumps({{"s": dt, "robolearn": sum(m.startswith("robolearn") for m in mods), "all": len(mods),
                  "heavy": [h for h in {heavy!r} if h in sys.modules]}}))
"""


def measure(code: str, repeats: int) -> dict:
    runs = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", PROBE.format(code=code, heavy=HEAVY)], capture_output=True,
                             text=True, check=True, cwd="/tmp")
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {**runs[-1], "s": statistics.median(r["s"] for r in runs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    print("| what | median wall (ms) | robolearn modules | all modules | heavy modules loaded |")
    print("|---|---|---|---|---|")
    for name, code in CASES.items():
        r = measure(code, args.repeats)
        print(f"| `{name}` | {1000 * r['s']:.1f} | {r['robolearn']} | {r['all']} | {', '.join(r['heavy']) or 'none'} |")


if __name__ == "__main__":
    main()
