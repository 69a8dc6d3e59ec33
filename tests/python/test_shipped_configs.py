"""Every shipped config validates at the world sizes its own header, the README and docs/ launch it
with (`mpirun -np N ... --config configs/X.yaml [--set K=V ...]`), with those overrides, and at the
world its parallel degrees describe; a config that pins a degree the launch line contradicts (say
`parallel.dp: 1` under `mpirun -np 8`) fails here with the engine's own message."""
import glob
import os
import re

import pytest

import myriad

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCH = re.compile(r"(?:mpirun|srun)\b[^\n`|]*?--config\s+configs/([\w.]+\.yaml)([^\n`|]*)")
NP = re.compile(r"(?:-np|-n|--ntasks)\s+(\d+)")


def documented_launches():
    """(config file, world, overrides, where) for every launch line naming a shipped config."""
    sources = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    sources += sorted(glob.glob(os.path.join(ROOT, "configs", "*.yaml")))
    found = []
    for path in sources:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                match = LAUNCH.search(line)
                if not match:
                    continue
                np_match = NP.search(line[:match.start(1)])
                if not np_match:
                    continue  # srun inside an allocation: the world is the allocation's
                overrides = re.findall(r"--set\s+([\w.]+=\S+)", match.group(2))
                where = f"{os.path.relpath(path, ROOT)}:{number}"
                found.append((match.group(1), int(np_match.group(1)), tuple(overrides), where))
    return found


LAUNCHES = documented_launches()


def test_the_docs_launch_the_shipped_configs():
    # The scan must find the launch lines it is meant to check (a regex that finds none checks nothing).
    named = {name for name, _, _, _ in LAUNCHES}
    assert {"gpt2_124m.yaml", "gpt2_124m_gpu.yaml", "gpt3_175b.yaml", "moe_1t.yaml"} <= named, named


@pytest.mark.parametrize("name,world,overrides,where", LAUNCHES, ids=[w for _, _, _, w in LAUNCHES])
def test_every_documented_launch_validates_at_its_world(name, world, overrides, where):
    config = myriad.Config.from_file(os.path.join(ROOT, "configs", name))
    for item in overrides:
        config.set(item)
    config.validate(world)  # raises myriad.Error naming the key that does not fit


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "configs", "*.yaml"))),
                         ids=os.path.basename)
def test_every_shipped_config_validates_at_the_world_its_degrees_describe(path):
    config = myriad.Config.from_file(path)
    degrees = [config[f"parallel.{k}"] for k in ("tp", "pp", "cp")]
    dp = config["parallel.dp"] or config["parallel.ep"]  # auto: the smallest dp that ep divides
    world = degrees[0] * degrees[1] * degrees[2] * dp
    config.validate(world)
