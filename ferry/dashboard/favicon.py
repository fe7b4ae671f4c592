"""The dashboard's icon, made here rather than shipped as a file: a green cell (an hour complete) on the
pages' navy. Pages link the SVG inline; ``/favicon.ico`` answers browsers that ask for it anyway (a JSON
endpoint opened in a tab), so no browser console shows a 404."""

from __future__ import annotations

import struct
from urllib.parse import quote

NAVY, GREEN = (0x24, 0x34, 0x47), (0x4C, 0xAF, 0x50)  # nav bar and the grid's "complete" (pages.STYLE)
SIZE = 16
ICON_SVG = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">'
            '<rect width="16" height="16" rx="3" fill="#243447"/><rect x="4" y="4" width="8" height="8" '
            'fill="#4caf50"/></svg>')
ICON_LINK = f'<link rel=icon type="image/svg+xml" href="data:image/svg+xml,{quote(ICON_SVG)}">'


def favicon_ico() -> bytes:
    """The same picture as a 16x16 32-bit ICO (one BMP image: header, bottom-up BGRA rows, AND mask)."""
    rows = []
    for y in range(SIZE - 1, -1, -1):  # BMP rows run bottom-up
        for x in range(SIZE):
            r, g, b = GREEN if 4 <= x < 12 and 4 <= y < 12 else NAVY
            rows.append(bytes((b, g, r, 0xFF)))
    pixels = b"".join(rows)
    mask = bytes(SIZE * 4)  # 1 bit per pixel, rows padded to 32 bits: all opaque
    bmp = struct.pack("<IiiHHIIiiII", 40, SIZE, 2 * SIZE, 1, 32, 0, len(pixels) + len(mask), 0, 0, 0, 0)
    image = bmp + pixels + mask
    header = struct.pack("<HHH", 0, 1, 1)
    entry = struct.pack("<BBBBHHII", SIZE, SIZE, 0, 0, 1, 32, len(image), 6 + 16)
    return header + entry + image
