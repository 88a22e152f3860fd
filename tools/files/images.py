"""``prepare_image``: an image made fit for the model, decoded in the reader child, never in the worker.

A PNG of 190 KB can declare 49 M pixels and take 150 MB and more to decode, and a worker that decoded such
images itself grew by gigabytes over a few runs. The child (``tools.files.child``) reads the size from the header
and refuses a bomb before any pixel is decoded, scales as it decodes, and holds one image under its memory cap;
the worker only ever holds the small result.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from tools.errors import FileUnreadable
from tools.files.child import DEFAULT_MAX_MEMORY, run_reader

#: Images that can be shown; other images (HEIC: Pillow reads it only with a plugin) are named, not decoded.
SHOWN_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "image/avif"})
#: One image's time limit in the child (a 48-megapixel PNG takes about a second to decode and scale).
IMAGE_SECONDS = 20.0

@dataclass(frozen=True, slots=True)
class PreparedImage:
    """An image as the model is sent it, and the size it came in."""

    data: bytes
    mimetype: str
    width: int
    height: int
    source_width: int
    source_height: int

    @property
    def reduced(self) -> bool:
        return (self.width, self.height) != (self.source_width, self.source_height)


async def prepare_image(
    data: bytes, mimetype: str, *, max_side: int, timeout: float = IMAGE_SECONDS, max_memory: int = DEFAULT_MAX_MEMORY
) -> PreparedImage:
    """``data`` decoded and scaled so its longer side is at most ``max_side``, as PNG (screenshots, transparency)
    or JPEG (photos). Raises ``FileUnreadable`` for an image that cannot be shown, cannot be decoded, declares too
    many pixels or needs more than ``timeout`` seconds or ``max_memory`` bytes."""
    base = mimetype.split(";", 1)[0].strip().lower()
    if base not in SHOWN_TYPES:
        kind = base.removeprefix("image/").upper()
        raise FileUnreadable(f"{kind} images cannot be shown here (PNG, JPEG, GIF, WebP and AVIF can)")
    answer = await run_reader("image", data, limit=max_side, timeout=timeout, max_memory=max_memory)
    if "error" in answer:
        raise FileUnreadable(str(answer["error"]))
    try:
        width, height = answer["source"]
        return PreparedImage(base64.b64decode(answer["data"], validate=True), str(answer["mimetype"]),
                             int(answer["width"]), int(answer["height"]), int(width), int(height))
    except (KeyError, TypeError, ValueError, binascii.Error) as exc:
        raise FileUnreadable(f"the image reader gave no image ({type(exc).__name__})") from exc
