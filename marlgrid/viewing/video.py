"""Episode videos as mp4 or GIF, for scripted agents, learners and people alike.

* :class:`VideoFile`: one file written frame by frame. mp4 frames stream to ffmpeg (the binary
  bundled with ``imageio-ffmpeg``, no system ffmpeg needed; H.264, yuv420p); GIF frames are kept
  in memory and written at the end. The file appears at its path only when complete: it is
  written under a hidden temporary name in the same folder and renamed on :meth:`VideoFile.close`.
* :class:`EpisodeRecorder`: episodes to files, with a trigger (every episode, every k-th, or on
  demand with :meth:`EpisodeRecorder.record_next`).
* :func:`record_episode`: play one episode of a PettingZoo marlgrid env with given policies and
  write its video; :class:`RecordEpisodes` wraps an env so that every episode it plays is offered
  to a recorder.

mp4 frames are padded at the bottom and right to multiples of 16 pixels (H.264 macro blocks) with
the frame background color. GIFs are written by Pillow, which merges identical consecutive frames
into one longer frame (the timing stays right; the frame count read back can be smaller).
imageio and imageio-ffmpeg are imported only when a file is written (``pip install
'marlgrid[video]'``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from marlgrid.episode import policy_action, resolve_policies, run_episode

__all__ = [
    "EpisodeRecorder",
    "RecordEpisodes",
    "VideoFile",
    "every",
    "never",
    "policy_action",
    "record_episode",
    "resolve_policies",
    "write_video",
]

FORMATS = ("mp4", "gif")
MACRO_BLOCK = 16
#: Color of the padding added to mp4 frames (the frame background of
#: :mod:`marlgrid.viewing.rendering`).
PAD_RGB = (24, 24, 28)


def _format_of(path: Path, fmt: str | None) -> str:
    fmt = (fmt or path.suffix.lstrip(".") or "mp4").lower()
    if fmt not in FORMATS:
        raise ValueError(f"video format must be one of {FORMATS}, got {fmt!r}")
    return fmt


def _missing(err: ImportError) -> Exception:
    from gymnasium.error import DependencyNotInstalled

    return DependencyNotInstalled(
        f"writing videos needs imageio and imageio-ffmpeg: pip install 'marlgrid[video]' ({err})"
    )


class VideoFile:
    """One video file, written atomically.

    Args:
        path: the file to write; its suffix gives the format unless ``fmt`` is given.
        fps: frames per second.
        fmt: ``mp4`` or ``gif``.
    """

    def __init__(self, path: str | os.PathLike, fps: float = 8, fmt: str | None = None) -> None:
        self.path = Path(path)
        self.fmt = _format_of(self.path, fmt)
        if self.path.suffix.lower() != "." + self.fmt:
            self.path = self.path.with_name(self.path.name + "." + self.fmt)
        if not fps > 0:
            raise ValueError(f"fps must be > 0, got {fps}")
        self.fps = float(fps)
        self.n_frames = 0
        self._shape: tuple[int, ...] | None = None
        self._tmp = self.path.with_name(f".{self.path.stem}.partial.{self.fmt}")
        self._writer: Any = None
        self._frames: list[np.ndarray] = []
        self.closed = False

    def add_frame(self, frame: np.ndarray) -> None:
        """Append one ``(H, W, 3)`` uint8 frame; every frame of a file has the same size."""
        if self.closed:
            raise ValueError(f"{self.path} is already closed")
        frame = np.asarray(frame)
        if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
            raise ValueError(f"frames must be (H, W, 3) uint8, got {frame.shape} {frame.dtype}")
        if self._shape is None:
            self._shape = frame.shape
        elif frame.shape != self._shape:
            raise ValueError(
                f"frame {self.n_frames} of {self.path} has shape {frame.shape}, the first had "
                f"{self._shape}"
            )
        if self.fmt == "gif":
            self._frames.append(frame.copy())
        else:
            self._send(frame)
        self.n_frames += 1

    def _send(self, frame: np.ndarray) -> None:
        h, w = frame.shape[:2]
        ph, pw = -h % MACRO_BLOCK, -w % MACRO_BLOCK
        if ph or pw:
            padded = np.empty((h + ph, w + pw, 3), dtype=np.uint8)
            padded[:] = PAD_RGB
            padded[:h, :w] = frame
            frame = padded
        if self._writer is None:
            try:
                import imageio_ffmpeg
            except ImportError as err:
                raise _missing(err) from err
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = imageio_ffmpeg.write_frames(
                str(self._tmp),
                (frame.shape[1], frame.shape[0]),
                fps=self.fps,
                codec="libx264",
                pix_fmt_out="yuv420p",
                macro_block_size=MACRO_BLOCK,
                ffmpeg_log_level="error",
            )
            self._writer.send(None)
        self._writer.send(np.ascontiguousarray(frame))

    def close(self) -> Path | None:
        """Finish the file and move it into place; returns its path (None if it had no frames)."""
        if self.closed:
            return self.path if self.n_frames else None
        self.closed = True
        if self.n_frames == 0:
            return None
        try:
            if self.fmt == "gif":
                try:
                    import imageio.v3 as iio
                except ImportError as err:
                    raise _missing(err) from err
                self.path.parent.mkdir(parents=True, exist_ok=True)
                iio.imwrite(
                    self._tmp,
                    np.stack(self._frames),
                    extension=".gif",
                    duration=1000.0 / self.fps,
                    loop=0,
                )
                self._frames = []
            else:
                self._writer.close()
                self._writer = None
            os.replace(self._tmp, self.path)
        except BaseException:
            self.abort()
            raise
        return self.path

    def abort(self) -> None:
        """Drop the file: nothing is left at its path or under the temporary name."""
        self.closed = True
        self._frames = []
        if self._writer is not None:
            with contextlib.suppress(Exception):  # the file is dropped anyway
                self._writer.close()
            self._writer = None
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> VideoFile:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_video(
    frames: Any, path: str | os.PathLike, fps: float = 8, fmt: str | None = None
) -> Path | None:
    """Write a sequence of ``(H, W, 3)`` uint8 frames to ``path`` atomically."""
    with VideoFile(path, fps, fmt) as video:
        for frame in frames:
            video.add_frame(frame)
    return video.close()


# -- triggers and the episode recorder ------------------------------------------------------


def every(k: int) -> Callable[[int], bool]:
    """Trigger recording episodes ``0, k, 2k, ...``."""
    if k < 1:
        raise ValueError(f"every(k) needs k >= 1, got {k}")
    return lambda episode: episode % k == 0


def never(episode: int) -> bool:
    """Trigger that records nothing by itself (use :meth:`EpisodeRecorder.record_next`)."""
    return False


class EpisodeRecorder:
    """Writes episodes to video files.

    Args:
        path_or_dir: a directory (one file per recorded episode, named
            ``{name_prefix}-{episode:04d}.{fmt}``) or a file path ending in ``.mp4`` / ``.gif``
            (all recorded episodes go into that one file, written on :meth:`close`).
        fps: frames per second.
        fmt: ``mp4`` (default) or ``gif``; a file path's suffix decides when not given.
        trigger: which episodes to record: ``None`` (all), an int ``k`` (every k-th: 0, k, ...),
            or a function of the episode number. :meth:`record_next` forces the next one.
        name_prefix: file name prefix in directory mode.

    Use: :meth:`start_episode` at each reset, :meth:`add_frame` for every frame (frames of
    episodes not selected are dropped at no cost), :meth:`end_episode` or :meth:`close`.
    ``add_frame`` before any ``start_episode`` starts episode 0.
    """

    def __init__(
        self,
        path_or_dir: str | os.PathLike,
        fps: float = 8,
        fmt: str | None = None,
        trigger: int | Callable[[int], bool] | None = None,
        name_prefix: str = "episode",
    ) -> None:
        target = Path(path_or_dir)
        self.single_file = target.suffix.lower().lstrip(".") in FORMATS
        self.target = target
        self.fmt = _format_of(target if self.single_file else Path("x"), fmt)
        self.fps = fps
        if trigger is None:
            trigger = every(1)
        elif isinstance(trigger, int):
            trigger = every(trigger)
        self.trigger: Callable[[int], bool] = trigger
        self.name_prefix = name_prefix
        self.episode = -1  # number of the current episode, -1 before the first
        self.recording = False
        self.paths: list[Path] = []
        self._forced = False
        self._video: VideoFile | None = None

    def record_next(self) -> None:
        """Record the next episode that starts, whatever the trigger says."""
        self._forced = True

    def start_episode(self) -> bool:
        """End the current episode and begin the next; returns whether it is recorded."""
        if self.episode >= 0:
            self.end_episode()
        self.episode += 1
        self.recording = self._forced or bool(self.trigger(self.episode))
        self._forced = False
        if self.recording and self._video is None:
            if self.single_file:
                path = self.target
            else:
                path = self.target / f"{self.name_prefix}-{self.episode:04d}.{self.fmt}"
            self._video = VideoFile(path, self.fps, self.fmt)
        return self.recording

    def add_frame(self, frame: np.ndarray) -> None:
        """Add a frame to the current episode (ignored when it is not recorded)."""
        if self.episode < 0:
            self.start_episode()
        if self.recording:
            assert self._video is not None
            self._video.add_frame(frame)

    def end_episode(self) -> Path | None:
        """Finish the current episode; in directory mode its file is written now."""
        path = None
        if self.recording and not self.single_file and self._video is not None:
            path = self._video.close()
            self._video = None
            if path is not None:
                self.paths.append(path)
        self.recording = False
        return path

    def close(self) -> list[Path]:
        """Finish everything; returns the paths of all files written."""
        self.end_episode()
        if self._video is not None:
            path = self._video.close()
            self._video = None
            if path is not None:
                self.paths.append(path)
        return list(self.paths)

    def __enter__(self) -> EpisodeRecorder:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        elif self._video is not None:
            self._video.abort()
            self._video = None


# -- playing episodes -----------------------------------------------------------------------

Policy = Any  # see marlgrid.episode: a scripted policy name or object, a joint policy, a callable


def record_episode(
    env: Any,
    policies: Policy | Mapping[str, Policy],
    path: str | os.PathLike,
    *,
    seed: int | None = None,
    fps: float | None = None,
    fmt: str | None = None,
    max_steps: int | None = None,
    render_kwargs: Mapping[str, Any] | None = None,
) -> dict[str, float]:
    """Play one episode of a PettingZoo marlgrid env and write its video to ``path``.

    ``policies`` is one policy for every agent or a dict agent -> policy, as for
    :func:`marlgrid.episode.run_episode`: a scripted policy name (``random``, ``oracle``,
    ``discoverer``), an object with ``scripted_actions(engine, k)``, a joint policy (``reset()``
    and ``actions(env, obs)``), or a callable from the agent's observation to an action (a
    learner). The video holds the reset frame and one frame per step (``steps + 1`` frames).
    Returns each agent's return.
    """
    from marlgrid.viewing.rendering import render_frame

    chosen = resolve_policies(env, policies)
    fps = fps or env.metadata.get("render_fps", 8)
    kwargs = dict(render_kwargs or {})
    with VideoFile(path, fps, fmt) as video:
        result = run_episode(
            env,
            chosen,
            seed=seed,
            max_steps=max_steps,
            on_frame=lambda e: video.add_frame(render_frame(e, **kwargs)),
        )
    return result.returns


class RecordEpisodes:
    """A PettingZoo marlgrid env that hands every frame of its episodes to a recorder.

    ``reset`` starts an episode of ``recorder``; ``reset`` and ``step`` add the frame of the new
    state; ``close`` closes the recorder too. Everything else is the wrapped env's.
    """

    def __init__(
        self, env: Any, recorder: EpisodeRecorder, render_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        self.env = env
        self.recorder = recorder
        self.render_kwargs = dict(render_kwargs or {})

    def _capture(self) -> None:
        if self.recorder.recording:
            from marlgrid.viewing.rendering import render_frame

            self.recorder.add_frame(render_frame(self.env, **self.render_kwargs))

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        out = self.env.reset(seed=seed, options=options)
        self.recorder.start_episode()
        self._capture()
        return out

    def step(self, actions: dict[str, Any]):
        out = self.env.step(actions)
        self._capture()
        if not self.env.agents:
            self.recorder.end_episode()
        return out

    def close(self) -> None:
        self.recorder.close()
        self.env.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)
