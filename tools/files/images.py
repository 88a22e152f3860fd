"""``prepare_image``: an image made fit for the model, with a guard against decompression bombs.

A PNG of a few kilobytes can declare 100,000 × 100,000 pixels and take gigabytes to decode. The size is read
from the header and checked before any pixel is decoded: Pillow's own ``Image.MAX_IMAGE_PIXELS`` check
(it errors past twice that limit) and a tighter one of ours, ``MAX_PIXELS``.
"""

from __future__ import annotations

from io import BytesIO

from tools.errors import FileUnreadable

#: The most pixels an image may declare (a 48-megapixel photo passes; a bomb's header does not).
MAX_PIXELS = 50_000_000
_JPEG_QUALITY = 85


def prepare_image(data: bytes, mimetype: str, *, max_side: int) -> tuple[bytes, str, int, int]:
    """``data`` decoded and scaled so its longer side is at most ``max_side``, as PNG (screenshots, images with
    transparency: text stays sharp) or JPEG (photos); returns ``(bytes, mimetype, width, height)``.

    CPU-bound (a large photo takes a few hundred milliseconds): call it in a worker thread. Raises
    ``FileUnreadable`` for an image that cannot be decoded or declares too many pixels."""
    from PIL import Image, ImageOps  # here: Pillow costs start-up time, few runs need it

    try:
        with Image.open(BytesIO(data)) as image:
            width, height = image.size
            if width * height > MAX_PIXELS:
                raise _bomb(width, height)
            image.seek(0)  # an animation: its first frame
            image.load()
            picture = ImageOps.exif_transpose(image)  # phone photos: stored sideways, shown upright
        picture.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
        alpha = picture.mode in ("RGBA", "LA", "PA") or "transparency" in picture.info
        photo = mimetype in ("image/jpeg", "image/webp") and not alpha
        out = BytesIO()
        if photo:
            picture.convert("RGB").save(out, "JPEG", quality=_JPEG_QUALITY, optimize=True)
        else:
            picture.convert("RGBA" if alpha else "RGB").save(out, "PNG", optimize=True)
    except FileUnreadable:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        too_many = f"the image declares more pixels than are decoded ({exc}) (a decompression bomb?)"
        raise FileUnreadable(too_many) from exc
    except Exception as exc:  # a hostile image may break Pillow anywhere (decoder, EXIF, encoder): never the run
        raise FileUnreadable(f"the image cannot be decoded ({type(exc).__name__}: {exc})") from exc
    return out.getvalue(), "image/jpeg" if photo else "image/png", picture.width, picture.height


def _bomb(width: int, height: int) -> FileUnreadable:
    return FileUnreadable(
        f"the image declares {width} × {height} pixels, more than the {MAX_PIXELS:,} that are decoded "
        "(a decompression bomb?)"
    )
