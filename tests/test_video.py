"""Episode videos: the writer, the recorder's triggers, record_episode and ``marlgrid-record``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

iio = pytest.importorskip("imageio.v3")
pytest.importorskip("imageio_ffmpeg")

import marlgrid  # noqa: E402
from marlgrid.viewing.rendering import frame_shape  # noqa: E402
from marlgrid.viewing.video import (  # noqa: E402
    EpisodeRecorder,
    RecordEpisodes,
    VideoFile,
    never,
    record_episode,
    write_video,
)


def frames(n: int, h: int = 37, w: int = 50) -> list[np.ndarray]:
    out = []
    for i in range(n):
        f = np.zeros((h, w, 3), dtype=np.uint8)
        f[:, : w // 2] = (200, 30, 30)
        f[: h // 2, w // 2 :] = (20, 20 + 20 * i, 220)
        out.append(f)
    return out


def read(path) -> np.ndarray:
    plugin = "FFMPEG" if str(path).endswith(".mp4") else None
    return iio.imread(path, index=None, plugin=plugin)


def test_mp4_round_trip_pads_to_macro_blocks(tmp_path):
    path = write_video(frames(12), tmp_path / "clip.mp4", fps=10)
    video = read(path)
    assert video.shape == (12, 48, 64, 3)  # 37x50 padded up to multiples of 16
    # H.264 is lossy, but a flat red area stays red.
    assert np.abs(video[:, 5:30, 3:20].astype(int) - (200, 30, 30)).mean() < 12
    assert iio.immeta(path, plugin="FFMPEG")["fps"] == 10


def test_gif_round_trip(tmp_path):
    path = write_video(frames(5), tmp_path / "clip.gif", fps=5)
    video = read(path)
    assert video.shape[:3] == (5, 37, 50)


def test_files_appear_only_when_complete(tmp_path):
    video = VideoFile(tmp_path / "a.mp4", fps=8)
    for f in frames(3):
        video.add_frame(f)
    assert not (tmp_path / "a.mp4").exists()
    assert video.close() == tmp_path / "a.mp4"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.mp4"]
    # An aborted file leaves nothing behind, neither the file nor its temporary.
    with pytest.raises(RuntimeError), VideoFile(tmp_path / "b.mp4") as broken:
        broken.add_frame(frames(1)[0])
        raise RuntimeError("learner crashed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.mp4"]


def test_frames_must_match(tmp_path):
    video = VideoFile(tmp_path / "c.gif")
    video.add_frame(frames(1)[0])
    with pytest.raises(ValueError, match="shape"):
        video.add_frame(np.zeros((10, 10, 3), np.uint8))
    with pytest.raises(ValueError, match="uint8"):
        video.add_frame(np.zeros((37, 50, 3), np.float32))
    video.abort()
    with pytest.raises(ValueError, match="format"):
        VideoFile(tmp_path / "d.avi")


def test_recorder_triggers(tmp_path):
    rec = EpisodeRecorder(tmp_path, fps=8, fmt="gif", trigger=2, name_prefix="ep")
    for episode in range(5):
        if episode == 3:
            rec.record_next()  # on demand
        rec.start_episode()
        for f in frames(episode + 2):
            rec.add_frame(f)
    written = rec.close()
    assert [p.name for p in written] == ["ep-0000.gif", "ep-0002.gif", "ep-0003.gif", "ep-0004.gif"]
    assert read(tmp_path / "ep-0004.gif").shape[0] == 6

    only_on_demand = EpisodeRecorder(tmp_path / "demand", fmt="gif", trigger=never)
    only_on_demand.start_episode()
    only_on_demand.add_frame(frames(1)[0])
    only_on_demand.record_next()
    only_on_demand.start_episode()
    only_on_demand.add_frame(frames(1)[0])
    assert [p.name for p in only_on_demand.close()] == ["episode-0001.gif"]


def test_recorder_single_file(tmp_path):
    with EpisodeRecorder(tmp_path / "all.gif", fps=4) as rec:
        for _ in range(3):
            rec.start_episode()
            for f in frames(2):
                rec.add_frame(f)
    assert rec.paths == [tmp_path / "all.gif"]
    assert read(tmp_path / "all.gif").shape[0] == 6


def test_record_episode_with_scripted_and_learned_policies(tmp_path):
    env = marlgrid.make("MarlGrid-Empty-5x5-v0", max_steps=12)
    returns = record_episode(env, "random", tmp_path / "scripted.mp4", seed=0, max_steps=7)
    assert set(returns) == {"agent_0"}
    video = read(tmp_path / "scripted.mp4")
    n_steps = env.step_count
    assert video.shape[0] == n_steps + 1
    assert video.shape[1:3] == tuple((s + 15) // 16 * 16 for s in frame_shape(env)[:2])

    seen = []

    def learner(obs: np.ndarray) -> int:  # a callable from the observation to an action
        seen.append(obs.shape)
        return 2

    record_episode(env, {"agent_0": learner}, tmp_path / "learned.mp4", seed=0)
    assert seen and seen[0] == (7, 7, 3)
    assert read(tmp_path / "learned.mp4").shape[0] == env.step_count + 1


def test_record_episodes_wrapper(tmp_path):
    env = RecordEpisodes(
        marlgrid.make("MarlGrid-Empty-5x5-v0", max_steps=5),
        EpisodeRecorder(tmp_path, fmt="gif", trigger=2),
        render_kwargs={"tile_size": 8},
    )
    for episode in range(3):
        env.reset(seed=episode)
        while env.agents:
            env.step({a: 0 for a in env.agents})  # turning: every frame differs
    env.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["episode-0000.gif", "episode-0002.gif"]
    video = read(tmp_path / "episode-0000.gif")
    assert video.shape[:3] == (6, *frame_shape(env, tile_size=8)[:2])  # reset + 5 steps


def test_marlgrid_record_writes_playable_mp4s(tmp_path):
    exe = shutil.which("marlgrid-record", path=os.path.dirname(sys.executable))
    cmd = [exe] if exe else [sys.executable, "-m", "marlgrid.viewing.record"]
    env_id = "MarlGrid-GoalCycle-13x13-3Agents-v0"
    args = [env_id, "--policy", "oracle", "--episodes", "3", "--out", str(tmp_path / "videos")]
    out = subprocess.run(
        [*cmd, *args, "--seed", "0", "--set", "max_steps=20", "--tile-size", "16"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    files = sorted((tmp_path / "videos").iterdir())
    assert [f.name for f in files] == [f"{env_id}-{i:04d}.mp4" for i in range(3)]
    for f in files:
        video = read(f)
        assert video.shape[0] == 21  # the reset frame and 20 steps, truncated at max_steps
        assert video.dtype == np.uint8 and video.shape[-1] == 3
    assert out.stdout.count("20 steps") == 3


def _record(*args: str) -> int:
    from marlgrid.viewing.record import main

    small = ["--format", "gif", "--tile-size", "4", "--no-views", "--max-steps", "3"]
    return main(["MarlGrid-Empty-5x5-v0", *small, *args])


@pytest.mark.parametrize("fps", ["0", "-1", "nan", "inf", "fast"])
def test_marlgrid_record_refuses_a_bad_fps(tmp_path, capsys, fps):
    with pytest.raises(SystemExit) as exit_info:
        _record("--out", str(tmp_path), "--fps", fps)
    assert exit_info.value.code == 2
    assert f"argument --fps: must be a float > 0, got '{fps}'" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_marlgrid_record_out_is_a_directory_or_a_video_file(tmp_path):
    taken = tmp_path / "notes.txt"
    taken.write_text("keep me")
    with pytest.raises(SystemExit, match=r"--out .*notes.txt is an existing file, not a directory"):
        _record("--out", str(taken))
    assert taken.read_text() == "keep me"
    # A file name with a video suffix gets every recorded episode.
    single = tmp_path / "all.gif"
    assert _record("--out", str(single), "--episodes", "2", "--fps", "4") == 0
    assert 2 <= read(single).shape[0] <= 8  # 2 x (reset + 3 steps); GIFs merge equal frames


def test_marlgrid_record_never_overwrites_without_overwrite(tmp_path, capsys):
    out = tmp_path / "videos"
    assert _record("--out", str(out), "--seed", "0") == 0
    video = out / "MarlGrid-Empty-5x5-v0-0000.gif"
    before = video.read_bytes()
    with pytest.raises(SystemExit, match=r"refusing to overwrite .*-0000.gif.*--overwrite"):
        _record("--out", str(out), "--seed", "1")
    assert video.read_bytes() == before
    assert _record("--out", str(out), "--seed", "0", "--overwrite") == 0
    assert video.read_bytes() == before  # the same episode, replaced in place
    assert (
        "--overwrite"
        in subprocess.run(
            [sys.executable, "-m", "marlgrid.viewing.record", "--help"],
            capture_output=True,
            text=True,
        ).stdout
    )
