"""A pygame window for ``render_mode="human"`` and the keyboard player.

pygame (the ``pygame-ce`` distribution, ``pip install marlgrid[human]``) is imported only when a
window opens. Only the display module is initialised (never the audio mixer), so the window also
works headless with ``SDL_VIDEODRIVER=dummy``.

Closing the window ends cleanly: the window goes away, :attr:`Viewer.closed` turns True, and
later frames are dropped without error, so an env keeps stepping; ``env.close()`` is still fine.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np


def _import_pygame():
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    try:
        import pygame
    except ImportError as err:  # pragma: no cover - depends on the environment
        from gymnasium.error import DependencyNotInstalled

        raise DependencyNotInstalled(
            "human rendering needs pygame-ce: pip install 'marlgrid[human]'"
        ) from err
    return pygame


class Viewer:
    """A window showing frames, paced to a frame rate.

    Args:
        caption: window title.
    """

    def __init__(self, caption: str = "marlgrid") -> None:
        self._pygame = pg = _import_pygame()
        pg.display.init()
        self.caption = caption
        self.clock = pg.time.Clock()
        self.screen: Any = None
        self.closed = False

    def show(self, frame: np.ndarray, fps: float | None = None, pump: bool = True) -> None:
        """Display ``frame`` (H, W, 3) uint8 and wait to keep ``fps`` frames per second.

        With ``pump`` the window's event queue is drained here: a close request closes the
        window and other events are dropped. The keyboard player passes ``pump=False`` and reads
        events with :meth:`events` instead.
        """
        if self.closed:
            return
        pg = self._pygame
        h, w = frame.shape[:2]
        if self.screen is None or self.screen.get_size() != (w, h):
            self.screen = pg.display.set_mode((w, h))
            pg.display.set_caption(self.caption)
        surface = pg.surfarray.make_surface(np.ascontiguousarray(frame.swapaxes(0, 1)))
        self.screen.blit(surface, (0, 0))
        pg.display.flip()
        if pump:
            for event in pg.event.get():
                if event.type == pg.QUIT:
                    self.close()
                    return
        if fps:
            self.clock.tick(fps)

    def set_caption(self, caption: str) -> None:
        """Change the window title."""
        self.caption = caption
        if self.screen is not None and not self.closed:
            self._pygame.display.set_caption(caption)

    def events(self, timeout_ms: int | None = None) -> list[tuple[str, str]]:
        """Pending window events as ``("key", name)`` or ``("quit", "")``.

        With ``timeout_ms`` it waits up to that long for a first event. Key names are pygame's
        (``"up"``, ``"left"``, ``"space"``, ``"backspace"``, ``"escape"``, ``"a"``, ...).
        """
        if self.closed:
            return [("quit", "")]
        pg = self._pygame
        raw = pg.event.get()
        if not raw and timeout_ms:
            first = pg.event.wait(timeout_ms)
            raw = [first] + pg.event.get() if first.type != pg.NOEVENT else []
        out = []
        for event in raw:
            if event.type == pg.QUIT:
                out.append(("quit", ""))
            elif event.type == pg.KEYDOWN:
                out.append(("key", pg.key.name(event.key)))
        return out

    def close(self) -> None:
        """Close the window (safe to call twice)."""
        if not self.closed:
            self.closed = True
            self.screen = None
            self._pygame.display.quit()


def show(viewer: Viewer | None, frame: np.ndarray, fps: float | None) -> Viewer:
    """Show ``frame`` in ``viewer`` (opened on first use) paced to ``fps``; returns the viewer."""
    if viewer is None:
        viewer = Viewer()
    viewer.show(frame, fps)
    return viewer
