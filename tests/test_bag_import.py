"""Robot logs back in: bags with known contents, imported and labelled by the task's own terms.

The bags are written with ``rosbags``' writers (ROS 1 ``.bag``, ROS 2 ``.db3`` and ``.mcap``) from a
real simulated cart-pole driven by a controller, so what the import must find is known: the
states, the commands and the simulator's own reward for every step. The end-to-end recording
through real ROS 1 nodes is in ``tests/test_ros1.py``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

import robolearn
from robolearn.cli.bag_import import import_bag, import_bag_command, read_mapping
from robolearn.data import Dataset
from robolearn.data.rosbag_io import BagError
from robolearn.sim2real.robots.sim_robot import SimulatedRobot
from robolearn.utils.config import ConfigError

MAPPING = {
    "task": "Cartpole-Balance",
    "joint_states": {"topic": "/robolearn/joint_states"},
    "commands": {"topic": "/robolearn/command"},
}
GAINS = np.array([0.92652558, 7.44385219, 1.13037537, 1.77949797])
"""The LQR of tests/deploy_support.py, on [x, sin theta, x_dot, theta_dot]."""


def rollout(steps: int, seed: int = 0, noise: float = 0.3, wide: bool = False) -> dict[str, np.ndarray]:
    """Drive a lockstep simulated cart-pole with LQR plus exploration noise; record everything
    (``wide``: from starts far from upright, so the commands span their range).
    """
    rng = np.random.default_rng(seed)
    robot = SimulatedRobot("Cartpole-Balance", seed=seed)
    pos, vel, cmds, rewards = [], [], [], []
    with robot:
        if wide:
            robot.set_state(rng.uniform([-0.8, -0.4], [0.8, 0.4]), rng.uniform(-0.5, 0.5, 2))
        for _ in range(steps):
            r = robot.read()
            pos.append(r.joint_pos)
            vel.append(r.joint_vel)
            x = np.array([r.joint_pos[0], math.sin(r.joint_pos[1]), r.joint_vel[0], r.joint_vel[1]])
            u = float(np.clip(GAINS @ x + rng.normal(0.0, noise), -1.0, 1.0))
            robot.send(np.array([u]))
            cmds.append([u])
            rewards.append(robot.last_reward)
        r = robot.read()
        pos.append(r.joint_pos)
        vel.append(r.joint_vel)
    return {"pos": np.array(pos), "vel": np.array(vel), "cmd": np.array(cmds), "reward": np.array(rewards)}


def write_bag(path: Path, log: dict[str, np.ndarray], *, dt: float = 0.01, t0: float = 1000.0, latency: float = 0.002,
              names: tuple[str, ...] = ("hinge", "slider", "extra"), every: int = 1, gap_after: int | None = None,
              trajectory: bool = False, corrupt: dict | None = None) -> Path:
    """Write ``log`` as a bag: JointState (header stamps, joints in ``names`` order with a spare
    one) every ``dt / every`` seconds, commands ``latency`` after the state they answer.
    """
    from rosbags.typesys import Stores, get_typestore

    ros1 = path.suffix == ".bag"
    store = get_typestore(Stores.ROS1_NOETIC if ros1 else Stores.ROS2_JAZZY)
    JointState = store.types["sensor_msgs/msg/JointState"]
    Header = store.types["std_msgs/msg/Header"]
    Time = store.types["builtin_interfaces/msg/Time"]
    F64 = store.types["std_msgs/msg/Float64MultiArray"]
    Layout = store.types["std_msgs/msg/MultiArrayLayout"]
    Traj = store.types["trajectory_msgs/msg/JointTrajectory"]
    Point = store.types["trajectory_msgs/msg/JointTrajectoryPoint"]
    Duration = store.types["builtin_interfaces/msg/Duration"]
    corrupt = corrupt or {}

    def stamp(t: float) -> object:
        sec = int(t)
        return Time(sec=sec, nanosec=int(round((t - sec) * 1e9)))

    def header(t: float, seq: int) -> object:
        return Header(seq=seq, stamp=stamp(t), frame_id="") if ros1 else Header(stamp=stamp(t), frame_id="")

    if ros1:
        from rosbags.rosbag1 import Writer

        writer = Writer(path)
    else:
        from rosbags.rosbag2 import StoragePlugin, Writer

        plugin = StoragePlugin.MCAP if path.suffix == ".mcap" else StoragePlugin.SQLITE3
        writer = Writer(path.with_suffix("") if path.suffix == ".db3" else path, version=9, storage_plugin=plugin)
    steps = len(log["cmd"])
    with writer:
        js_conn = writer.add_connection("/robolearn/joint_states", JointState.__msgtype__, typestore=store)
        cmd_type = Traj.__msgtype__ if trajectory else F64.__msgtype__
        cmd_conn = writer.add_connection("/robolearn/command", cmd_type, typestore=store)
        shift = 0.0
        for k in range(steps + 1):
            if gap_after is not None and k == gap_after + 1:
                shift = 2.0  # the recording paused for two seconds
            # states between control ticks (a faster sensor): linear in between, exact on the ticks
            for sub in range(every):
                if k == steps and sub > 0:
                    break
                frac = sub / every
                p = log["pos"][k] if sub == 0 else (1 - frac) * log["pos"][k] + frac * log["pos"][k + 1]
                v = log["vel"][k] if sub == 0 else (1 - frac) * log["vel"][k] + frac * log["vel"][k + 1]
                t = t0 + shift + (k + frac) * dt
                values = {"slider": (p[0], v[0]), "hinge": (p[1], v[1]), "extra": (7.0, 0.0)}
                position = [values[n][0] for n in names]
                velocity = [values[n][1] for n in names]
                msg_names = list(names)
                if k == corrupt.get("step"):
                    if corrupt["kind"] == "nan":
                        velocity[0] = math.nan
                    elif corrupt["kind"] == "length":
                        position = position[:-1]
                    elif corrupt["kind"] == "names":
                        msg_names = ["a", "b", "c"][: len(names)]
                msg = JointState(header=header(t, k), name=msg_names, position=np.array(position, np.float64),
                                 velocity=np.array(velocity, np.float64), effort=np.array([], np.float64))
                writer.write(js_conn, int(t * 1e9), store.serialize_ros1(msg, JointState.__msgtype__) if ros1
                             else store.serialize_cdr(msg, JointState.__msgtype__))
            if k < steps:
                t = t0 + shift + k * dt + latency
                u = log["cmd"][k]
                if corrupt.get("command") == k:
                    u = np.array([u[0], 0.0])
                if trajectory:
                    msg = Traj(header=header(0.0, k), joint_names=["slider"],
                               points=[Point(positions=np.array([], np.float64), velocities=np.array([], np.float64),
                                             accelerations=np.array([], np.float64), effort=np.array(u, np.float64),
                                             time_from_start=Duration(sec=0, nanosec=0))])
                else:
                    msg = F64(layout=Layout(dim=[], data_offset=0), data=np.array(u, np.float64))
                writer.write(cmd_conn, int(t * 1e9), store.serialize_ros1(msg, cmd_type) if ros1
                             else store.serialize_cdr(msg, cmd_type))
    return path if not path.suffix == ".db3" else path.with_suffix("")


@pytest.fixture(scope="module")
def log() -> dict[str, np.ndarray]:
    return rollout(300)


@pytest.mark.parametrize("suffix", [".bag", ".db3", ".mcap"])
def test_import_reproduces_states_commands_and_the_simulators_rewards(tmp_path: Path, log: dict, suffix: str) -> None:
    bag = write_bag(tmp_path / f"log{suffix}", log)
    data = import_bag(bag, MAPPING, tmp_path / "imported.h5")
    assert len(data) == 300 and data.episode_lengths.tolist() == [300]
    # rewards labelled by the task's terms equal the simulator's own for the same steps; float64
    # states, one interpolation at a stamp that is the tick itself: agreement to rounding
    np.testing.assert_allclose(data.rewards.numpy(), log["reward"], rtol=0, atol=1e-6)  # stored as float32
    np.testing.assert_allclose(data.actions[:, 0].numpy(), log["cmd"][:, 0], atol=1e-6)
    obs = data.observations["policy"].numpy()
    np.testing.assert_allclose(obs[:, 0], log["pos"][:300, 0], atol=1e-6)
    np.testing.assert_allclose(obs[:, 1], np.cos(log["pos"][:300, 1]), atol=1e-6)
    np.testing.assert_allclose(obs[:, 4], log["vel"][:300, 1], atol=1e-5)
    assert bool(data.timeouts[-1]) and not bool(data.terminals.any())
    meta = data.metadata.extra
    assert meta["labelling"]["reward_terms"] == {"smooth_balance": 1.0} and meta["bag"]["file"] == bag.name
    assert len(meta["bag"]["sha256"]) == 64 and data.metadata.source == "rosbag"
    again = Dataset.load(tmp_path / "imported.h5")
    assert torch.equal(again.rewards, data.rewards)


def test_a_faster_sensor_is_resampled_to_the_control_rate(tmp_path: Path, log: dict) -> None:
    bag = write_bag(tmp_path / "fast.bag", log, every=2, trajectory=True)  # JointState at 200 Hz
    data = import_bag(bag, MAPPING)
    assert len(data) == 300
    np.testing.assert_allclose(data.rewards.numpy(), log["reward"], atol=1e-6)


def test_a_gap_in_the_recording_starts_a_new_episode(tmp_path: Path, log: dict) -> None:
    bag = write_bag(tmp_path / "gap.bag", log, gap_after=120)
    data = import_bag(bag, MAPPING)
    # the step from state 120 to 121 straddles the pause: it belongs to neither episode
    assert data.episode_lengths.tolist() == [120, 179]
    assert data.timeouts.nonzero().flatten().tolist() == [119, 298]
    np.testing.assert_allclose(data.rewards[120:].numpy(), log["reward"][121:], atol=1e-6)
    np.testing.assert_allclose(data.final_observations["policy"][0, 0].item(), log["pos"][120, 0], atol=1e-6)


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        ({"step": 40, "kind": "nan"}, r"/robolearn/joint_states\[40\] \(t=1000.4\d*\): velocity of \['hinge'\] is not finite"),
        ({"step": 7, "kind": "length"}, r"/robolearn/joint_states\[7\] .*position has 2 values for 3 names"),
        ({"step": 3, "kind": "names"}, r"/robolearn/joint_states\[3\] .*name lacks joints \['slider', 'hinge'\]"),
        ({"command": 9}, r"/robolearn/command\[9\] .*data has 2 values, expected 1"),
    ],
)
def test_malformed_messages_are_refused_naming_the_message_and_field(tmp_path: Path, log: dict, corrupt: dict,
                                                                     message: str) -> None:
    bag = write_bag(tmp_path / "bad.bag", log, corrupt=corrupt)
    with pytest.raises(BagError, match=message):
        import_bag(bag, MAPPING, tmp_path / "never.h5")
    assert not (tmp_path / "never.h5").exists()


def test_mapping_and_command_line_errors(tmp_path: Path, log: dict) -> None:
    with pytest.raises(ConfigError, match=r"mapping.task: missing"):
        read_mapping({"joint_states": {"topic": "a"}, "commands": {"topic": "b"}})
    with pytest.raises(ConfigError, match=r"mapping.commands.trajectory_field: expected positions"):
        read_mapping({**MAPPING, "commands": {"topic": "b", "trajectory_field": "jerk"}})
    with pytest.raises(ConfigError, match=r"mapping.task: Ant has a floating base"):
        import_bag(tmp_path / "none.bag", {**MAPPING, "task": "Ant"})
    bag = write_bag(tmp_path / "log.bag", log)
    with pytest.raises(BagError, match=r"no topic '/other' \(it has \['/robolearn/command', '/robolearn/joint_states'\]\)"):
        import_bag(bag, {**MAPPING, "commands": {"topic": "/other"}})
    with pytest.raises(ConfigError, match=r"mapping.commands.joints: expected the task's action joints"):
        import_bag(bag, {**MAPPING, "commands": {"topic": "/robolearn/command", "joints": ["hinge"]}})
    assert import_bag_command([f"bag={bag}", "mapping=" + str(Path(__file__).parents[1] / "configs/bag_mappings/cartpole.yaml"),
                               f"out={tmp_path / 'cli.h5'}"]) == 0
    with pytest.raises(ConfigError, match=r"out: .*cli.h5 exists"):
        import_bag_command([f"bag={bag}", "mapping=x", f"out={tmp_path / 'cli.h5'}"])


def write_joint_log(path: Path, names: list[str], pos: np.ndarray, vel: np.ndarray, cmds: np.ndarray, dt: float,
                    t0: float = 50.0, latency: float = 0.001) -> Path:
    """Any task's log as a ROS 2 ``.mcap``: JointState ``/js`` (joints in ``names`` order) every ``dt``,
    Float64MultiArray ``/cmd`` ``latency`` after the state it answers.
    """
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_JAZZY)
    JointState, Header = store.types["sensor_msgs/msg/JointState"], store.types["std_msgs/msg/Header"]
    Time, F64 = store.types["builtin_interfaces/msg/Time"], store.types["std_msgs/msg/Float64MultiArray"]
    Layout = store.types["std_msgs/msg/MultiArrayLayout"]
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        js = writer.add_connection("/js", JointState.__msgtype__, typestore=store)
        cmd = writer.add_connection("/cmd", F64.__msgtype__, typestore=store)
        for k in range(len(pos)):
            ns = round((t0 + k * dt) * 1e9)
            msg = JointState(header=Header(stamp=Time(sec=ns // 10**9, nanosec=ns % 10**9), frame_id=""), name=names,
                             position=pos[k].copy(), velocity=vel[k].copy(), effort=np.zeros(0))
            writer.write(js, ns, store.serialize_cdr(msg, JointState.__msgtype__))
            if k < len(cmds):
                msg = F64(layout=Layout(dim=[], data_offset=0), data=cmds[k].copy())
                writer.write(cmd, ns + round(latency * 1e9), store.serialize_cdr(msg, F64.__msgtype__))
    return path


def test_a_termination_ends_the_episode_where_the_task_says(tmp_path: Path) -> None:
    """Hopper: a reward on the step's displacement (``prev_qpos``), a termination term and clipped
    observations. The robot (a twin env without the termination) keeps going after it falls; the
    import must end the episode at the step the task's own env terminated, with that env's
    rewards, observations and final observation (float32 storage: 1e-5 absolute on values of
    order 1-10), and drop the rest of the log.
    """
    from robolearn.spec import PolicySpec

    task = robolearn.make("Hopper", 1, seed=3, dtype=torch.float64)
    robot = robolearn.make("Hopper", 1, seed=3, dtype=torch.float64, terminations={})
    obs, _ = task.reset()
    robot.reset()
    rng = np.random.default_rng(0)
    pos, vel, cmds, rewards, terminated, observations = [], [], [], [], [], []
    final = None
    for _ in range(60):
        pos.append(robot.sim.qpos[0].numpy().copy())
        vel.append(robot.sim.qvel[0].numpy().copy())
        action = torch.from_numpy(rng.uniform(-1.0, 1.0, (1, task.action_dim)))
        if final is None:
            np.testing.assert_array_equal(task.sim.qpos[0].numpy(), pos[-1])  # the twins agree while it stands
            observations.append(obs["policy"][0].numpy().copy())
            obs, reward, term, trunc, info = task.step(action)
            rewards.append(float(reward[0]))
            terminated.append(bool(term[0]))
            if bool(term[0] | trunc[0]):
                final = info["final_obs"]["policy"][0].numpy().copy()
        robot.step(action)
        cmds.append(action[0].numpy())  # torque, scale 1, offset 0: the command is the action
    pos.append(robot.sim.qpos[0].numpy().copy())
    vel.append(robot.sim.qvel[0].numpy().copy())
    assert final is not None and terminated[-1] and 5 < len(rewards) < 60, "the random hopper should fall in 60 steps"
    names = list(PolicySpec.from_dict(task.policy_spec()).qpos_joints)[::-1]  # the message's order is not qpos order
    bag = write_joint_log(tmp_path / "hopper.mcap", names, np.array(pos)[:, ::-1], np.array(vel)[:, ::-1],
                          np.array(cmds), task.dt)
    data = import_bag(bag, {"task": "Hopper", "joint_states": {"topic": "/js"}, "commands": {"topic": "/cmd"}})
    n = len(rewards)
    assert len(data) == n and data.terminals.nonzero().flatten().tolist() == [n - 1] and not bool(data.timeouts.any())
    np.testing.assert_allclose(data.rewards.numpy(), rewards, rtol=0, atol=1e-5)
    np.testing.assert_allclose(data.observations["policy"].numpy(), np.array(observations), rtol=0, atol=1e-5)
    np.testing.assert_allclose(data.final_observations["policy"][0].numpy(), final, rtol=0, atol=1e-5)
    np.testing.assert_allclose(data.actions.numpy(), np.array(cmds[:n]), rtol=0, atol=1e-6)
    labelling = data.metadata.extra["labelling"]
    assert labelling["reward_terms"] == {"forward": 1.0, "healthy": 1.0, "ctrl_cost": -1e-3}
    assert labelling["termination_terms"] == ["unhealthy"] and labelling["rate_hz"] == pytest.approx(125.0)


def test_align_interpolates_states_and_holds_commands_by_hand() -> None:
    """Irregular joint-state stamps of a linear signal (interpolation is exact on it), commands
    arriving between ticks: the ticks, states, held commands and episode split computed by hand.
    """
    from robolearn.data.rosbag_io import Commands, JointStates, align

    stamps = np.array([0.0, 0.013, 0.021, 0.034, 0.040, 0.052, 1.0, 1.011, 1.025])  # a 0.948 s pause
    js = JointStates(stamps, (2.0 * stamps + 1.0)[:, None], (-stamps)[:, None])
    cmds = Commands(np.array([0.005, 0.019, 0.0305, 1.002]), np.array([[10.0], [20.0], [30.0], [40.0]]))
    log = align(js, cmds, rate_hz=100.0)
    # episode 1: ticks 0, .01, .02, .03, .04, .05 (the last state is at .052); episode 2: 1.0, 1.01, 1.02
    np.testing.assert_allclose(log.ticks, [0.0, 0.01, 0.02, 0.03, 0.04, 0.05, 1.0, 1.01, 1.02], atol=1e-12)
    assert log.episode_lengths.tolist() == [5, 2]
    np.testing.assert_allclose(log.position[:, 0], 2.0 * log.ticks + 1.0, atol=1e-12)
    np.testing.assert_allclose(log.velocity[:, 0], -log.ticks, atol=1e-12)
    # the step t -> t + 0.01 is driven by the latest command received by its end
    assert log.commands[:, 0].tolist() == [10.0, 20.0, 20.0, 30.0, 30.0, 40.0, 40.0]
    short = align(js, cmds, rate_hz=100.0, max_steps=3)
    assert short.episode_lengths.tolist() == [3] and len(short.position) == 4
    with pytest.raises(BagError, match="rate_hz: expected a positive rate"):
        align(js, cmds, rate_hz=0.0)


def test_align_phases_the_ticks_on_a_robots_stamps_not_on_a_late_first_state() -> None:
    """A 100 Hz robot log (a linear signal) whose stamps jitter around its control ticks: when the
    recording starts on a state stamped 3.1 ms late, the ticks still fall on the robot's grid (the
    median phase), not 3.1 ms off it between every two states; a grid whose jitter wraps around the
    period's circle (states a little early) keeps its phase 0; a 50 Hz log is ticked from its first
    state, as an irregular one is.
    """
    from robolearn.data.rosbag_io import Commands, JointStates, align

    jitter = np.array([0.0, -4e-4, 2e-4, -1e-4, 3e-4, -2e-4, 0.0, 1e-4, -3e-4])  # median 0
    on_grid = 0.01 * np.arange(1, 10) + jitter

    def log(stamps: np.ndarray) -> JointStates:
        return JointStates(stamps, (2.0 * stamps + 1.0)[:, None], (-stamps)[:, None])

    cmds = Commands(np.array([0.0]), np.array([[1.0]]))
    late = align(log(np.concatenate([[0.0031], on_grid])), cmds, rate_hz=100.0)
    np.testing.assert_allclose(late.ticks, 0.01 * np.arange(1, 9), atol=1e-12)  # not 0.0031, 0.0131, ...
    np.testing.assert_allclose(late.position[:, 0], 2.0 * late.ticks + 1.0, atol=1e-12)
    # phases 0, 9.6, 0.2, 9.9, 0.3, 9.8, ... ms: a median on the line would put the grid 0.3 ms late
    wrapped = align(log(on_grid), cmds, rate_hz=100.0)
    np.testing.assert_allclose(wrapped.ticks, 0.01 * np.arange(1, 9), atol=1e-12)
    slow = align(log(np.concatenate([[0.0031], 0.02 * np.arange(1, 6)])), cmds, rate_hz=100.0)
    np.testing.assert_allclose(slow.ticks, 0.0031 + 0.01 * np.arange(10), atol=1e-12)


def _merge(sets: list[Dataset]) -> Dataset:
    """Imported episodes as one dataset (fields concatenated, the first one's metadata)."""
    return Dataset(
        {"policy": torch.cat([d.observations["policy"] for d in sets])},
        torch.cat([d.actions for d in sets]),
        torch.cat([d.rewards for d in sets]),
        torch.cat([d.terminals for d in sets]),
        torch.cat([d.timeouts for d in sets]),
        final_observations={"policy": torch.cat([d.final_observations["policy"] for d in sets])},
        metadata=sets[0].metadata,
    )


def test_behaviour_cloning_on_an_imported_bag_reproduces_held_out_commands(tmp_path: Path) -> None:
    """BC with the offline runner on 6 imported episodes of a deterministic controller from wide
    starts; the held-out commands of 2 more are reproduced within 0.05 mean absolute error and
    under a fifth of their own spread around their mean (an import that paired states with the
    wrong commands, shifted or shuffled, does far worse).
    """
    from robolearn.cli.main import main

    logs = [rollout(150, seed=s, noise=0.0, wide=True) for s in range(8)]
    sets = [import_bag(write_bag(tmp_path / f"ep{s}.bag", lg), MAPPING) for s, lg in enumerate(logs)]
    _merge(sets[:6]).save(tmp_path / "train.h5")
    run = tmp_path / "bc"
    assert main(["train", "algo=bc", "task=Cartpole-Balance", f"dataset={tmp_path / 'train.h5'}", "total_grad_steps=1500",
                 f"run_dir={run}", "algo.actor_hidden=[64,64]", "runner.video=false", "runner.console=false",
                 "runner.tensorboard=false", "eval_num_envs=4"]) == 0
    policy = robolearn.load_policy(run)
    held = _merge(sets[6:])
    predicted = policy.act({"policy": held.observations["policy"]}).clamp(-1, 1)
    mae = float((predicted[:, 0] - held.actions[:, 0]).abs().mean())
    spread = float((held.actions[:, 0] - held.actions[:, 0].mean()).abs().mean())
    print(f"BC on imported bags: held-out command MAE {mae:.4f} (the commands' mean absolute deviation {spread:.4f})")
    assert mae < 0.05 and mae < spread / 5


def test_mapping_types_are_checked_and_out_of_range_commands_clipped_and_counted(tmp_path: Path, log: dict) -> None:
    bag = write_bag(tmp_path / "log.bag", log)
    typed = {**MAPPING, "commands": {"topic": "/robolearn/command", "type": "trajectory_msgs/JointTrajectory"}}
    with pytest.raises(BagError, match=r"topic '/robolearn/command' has type std_msgs/msg/Float64MultiArray, "
                                       r"the mapping says trajectory_msgs/JointTrajectory"):
        import_bag(bag, typed)
    ok = {**MAPPING, "joint_states": {"topic": "/robolearn/joint_states", "type": "sensor_msgs/msg/JointState"}}
    assert import_bag(bag, ok).metadata.extra["labelling"]["actions_clipped"] == 0
    loud = dict(log, cmd=log["cmd"] * 3.0)  # commands the cart's actuator range (+-1) cannot express
    data = import_bag(write_bag(tmp_path / "loud.bag", loud), MAPPING)
    expected = int((np.abs(loud["cmd"][:, 0]) > 1.0).sum())
    assert expected > 10 and data.metadata.extra["labelling"]["actions_clipped"] == expected
    assert float(data.actions.abs().max()) == 1.0
