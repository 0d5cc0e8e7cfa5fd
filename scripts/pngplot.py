"""A small line-plot writer to PNG in pure Python (zlib and struct only): the plots of
scripts/bench-incast, on a host without matplotlib.

    from pngplot import Figure
    fig = Figure(900, 600)
    ax = fig.panel(0, 0, 900, 300, title="...", xlabel="s", ylabel="Mb/s")
    ax.line(xs, ys, color)           # as many series as wanted
    ax.hline(y, color, dashed=True)
    ax.legend([("sender 0", color), ...])
    fig.save("out.png")

Text is drawn in a built-in 5x7 pixel font (digits, letters shown in capitals, and a few signs).
"""
import struct
import zlib

# 5x7 glyphs: 7 rows of 5 pixels ("#" set) per character.
_FONT_SRC = {
    '0': [' ### ', '#   #', '#  ##', '# # #', '##  #', '#   #', ' ### '],
    '1': ['  #  ', ' ##  ', '  #  ', '  #  ', '  #  ', '  #  ', ' ### '],
    '2': [' ### ', '#   #', '    #', '   # ', '  #  ', ' #   ', '#####'],
    '3': ['#####', '   # ', '  #  ', '   # ', '    #', '#   #', ' ### '],
    '4': ['   # ', '  ## ', ' # # ', '#  # ', '#####', '   # ', '   # '],
    '5': ['#####', '#    ', '#### ', '    #', '    #', '#   #', ' ### '],
    '6': ['  ## ', ' #   ', '#    ', '#### ', '#   #', '#   #', ' ### '],
    '7': ['#####', '    #', '   # ', '  #  ', ' #   ', ' #   ', ' #   '],
    '8': [' ### ', '#   #', '#   #', ' ### ', '#   #', '#   #', ' ### '],
    '9': [' ### ', '#   #', '#   #', ' ####', '    #', '   # ', ' ##  '],
    'A': [' ### ', '#   #', '#   #', '#####', '#   #', '#   #', '#   #'],
    'B': ['#### ', '#   #', '#   #', '#### ', '#   #', '#   #', '#### '],
    'C': [' ### ', '#   #', '#    ', '#    ', '#    ', '#   #', ' ### '],
    'D': ['###  ', '#  # ', '#   #', '#   #', '#   #', '#  # ', '###  '],
    'E': ['#####', '#    ', '#    ', '#### ', '#    ', '#    ', '#####'],
    'F': ['#####', '#    ', '#    ', '#### ', '#    ', '#    ', '#    '],
    'G': [' ### ', '#   #', '#    ', '# ###', '#   #', '#   #', ' ####'],
    'H': ['#   #', '#   #', '#   #', '#####', '#   #', '#   #', '#   #'],
    'I': [' ### ', '  #  ', '  #  ', '  #  ', '  #  ', '  #  ', ' ### '],
    'J': ['  ###', '   # ', '   # ', '   # ', '   # ', '#  # ', ' ##  '],
    'K': ['#   #', '#  # ', '# #  ', '##   ', '# #  ', '#  # ', '#   #'],
    'L': ['#    ', '#    ', '#    ', '#    ', '#    ', '#    ', '#####'],
    'M': ['#   #', '## ##', '# # #', '# # #', '#   #', '#   #', '#   #'],
    'N': ['#   #', '#   #', '##  #', '# # #', '#  ##', '#   #', '#   #'],
    'O': [' ### ', '#   #', '#   #', '#   #', '#   #', '#   #', ' ### '],
    'P': ['#### ', '#   #', '#   #', '#### ', '#    ', '#    ', '#    '],
    'Q': [' ### ', '#   #', '#   #', '#   #', '# # #', '#  # ', ' ## #'],
    'R': ['#### ', '#   #', '#   #', '#### ', '# #  ', '#  # ', '#   #'],
    'S': [' ####', '#    ', '#    ', ' ### ', '    #', '    #', '#### '],
    'T': ['#####', '  #  ', '  #  ', '  #  ', '  #  ', '  #  ', '  #  '],
    'U': ['#   #', '#   #', '#   #', '#   #', '#   #', '#   #', ' ### '],
    'V': ['#   #', '#   #', '#   #', '#   #', '#   #', ' # # ', '  #  '],
    'W': ['#   #', '#   #', '#   #', '# # #', '# # #', '# # #', ' # # '],
    'X': ['#   #', '#   #', ' # # ', '  #  ', ' # # ', '#   #', '#   #'],
    'Y': ['#   #', '#   #', ' # # ', '  #  ', '  #  ', '  #  ', '  #  '],
    'Z': ['#####', '    #', '   # ', '  #  ', ' #   ', '#    ', '#####'],
    ' ': ['     ', '     ', '     ', '     ', '     ', '     ', '     '],
    '.': ['     ', '     ', '     ', '     ', '     ', ' ##  ', ' ##  '],
    ',': ['     ', '     ', '     ', '     ', ' ##  ', '  #  ', ' #   '],
    ':': ['     ', ' ##  ', ' ##  ', '     ', ' ##  ', ' ##  ', '     '],
    '-': ['     ', '     ', '     ', '#####', '     ', '     ', '     '],
    '+': ['     ', '  #  ', '  #  ', '#####', '  #  ', '  #  ', '     '],
    '/': ['     ', '    #', '   # ', '  #  ', ' #   ', '#    ', '     '],
    '(': ['   # ', '  #  ', ' #   ', ' #   ', ' #   ', '  #  ', '   # '],
    ')': [' #   ', '  #  ', '   # ', '   # ', '   # ', '  #  ', ' #   '],
    '%': ['##   ', '##  #', '   # ', '  #  ', ' #   ', '#  ##', '   ##'],
    '=': ['     ', '     ', '#####', '     ', '#####', '     ', '     '],
    '<': ['   # ', '  #  ', ' #   ', '#    ', ' #   ', '  #  ', '   # '],
    '>': [' #   ', '  #  ', '   # ', '    #', '   # ', '  #  ', ' #   '],
    '_': ['     ', '     ', '     ', '     ', '     ', '     ', '#####'],
    "'": ['  #  ', '  #  ', ' #   ', '     ', '     ', '     ', '     '],
    '*': ['     ', '# # #', ' ### ', '#####', ' ### ', '# # #', '     '],
    '?': [' ### ', '#   #', '    #', '   # ', '  #  ', '     ', '  #  '],
    '#': [' # # ', '#####', ' # # ', ' # # ', ' # # ', '#####', ' # # '],
}


def _glyph(rows):
    return [[ch == "#" for ch in row] for row in rows]


_FONT = {k: _glyph(v) for k, v in _FONT_SRC.items()}

# A palette that tells eight series apart.
COLORS = [
    (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40),
    (148, 103, 189), (140, 86, 75), (227, 119, 194), (23, 190, 207),
]
BLACK = (0, 0, 0)
GREY = (200, 200, 200)
DARK = (90, 90, 90)


class Figure:
    def __init__(self, width, height, bg=(255, 255, 255)):
        self.w, self.h = width, height
        self.px = bytearray(bytes(bg) * (width * height))

    def set(self, x, y, c):
        if 0 <= x < self.w and 0 <= y < self.h:
            i = (y * self.w + x) * 3
            self.px[i:i + 3] = bytes(c)

    def rect(self, x0, y0, x1, y1, c):
        for y in range(max(0, y0), min(self.h, y1)):
            for x in range(max(0, x0), min(self.w, x1)):
                self.set(x, y, c)

    def line(self, x0, y0, x1, y1, c, width=1, dashed=False):
        x0, y0, x1, y1 = int(round(x0)), int(round(y0)), int(round(x1)), int(round(y1))
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err, n = dx + dy, 0
        while True:
            if not dashed or (n // 6) % 2 == 0:
                for ox in range(-(width // 2), width - width // 2):
                    for oy in range(-(width // 2), width - width // 2):
                        self.set(x0 + ox, y0 + oy, c)
            n += 1
            if x0 == x1 and y0 == y1:
                break
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def text(self, x, y, s, c=BLACK, scale=1, vertical=False):
        """Draws `s` with its top left corner at (x, y) (vertical: upwards from (x, y))."""
        for ch in s:
            g = _FONT.get(ch.upper(), _FONT["*"])
            for r in range(7):
                for col in range(5):
                    if g[r][col]:
                        for a in range(scale):
                            for b in range(scale):
                                if vertical:
                                    self.set(x + r * scale + a, y - col * scale - b, c)
                                else:
                                    self.set(x + col * scale + a, y + r * scale + b, c)
            if vertical:
                y -= 6 * scale
            else:
                x += 6 * scale

    @staticmethod
    def text_width(s, scale=1):
        return len(s) * 6 * scale

    def panel(self, x, y, w, h, **kw):
        return Panel(self, x, y, w, h, **kw)

    def save(self, path):
        raw = b"".join(b"\x00" + bytes(self.px[r * self.w * 3:(r + 1) * self.w * 3])
                       for r in range(self.h))

        def chunk(tag, data):
            body = tag + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xffffffff)

        png = b"\x89PNG\r\n\x1a\n"
        png += chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0))
        png += chunk(b"IDAT", zlib.compress(raw, 9))
        png += chunk(b"IEND", b"")
        with open(path, "wb") as f:
            f.write(png)


def _nice_step(span, n=5):
    """A tick step of 1, 2 or 5 times a power of ten giving about n ticks over span."""
    if span <= 0:
        return 1.0
    raw = span / n
    p = 10 ** len(str(int(raw))) / 10 if raw >= 1 else 1.0
    while p > raw:
        p /= 10
    for m in (1, 2, 5, 10):
        if m * p >= raw:
            return m * p
    return 10 * p


def _fmt(v):
    return str(int(round(v))) if abs(v - round(v)) < 1e-9 else f"{v:g}"


class Panel:
    """A plotting area with axes; data coordinates set by xlim/ylim (or the data)."""

    def __init__(self, fig, x, y, w, h, title="", xlabel="", ylabel="", xlim=None, ylim=None):
        self.fig = fig
        self.x0, self.y0 = x + 60, y + 24          # plot area inside margins
        self.x1, self.y1 = x + w - 150, y + h - 34
        self.title, self.xlabel, self.ylabel = title, xlabel, ylabel
        self.xlim, self.ylim = xlim, ylim
        self.series, self.hlines, self.items = [], [], []

    def line(self, xs, ys, color, width=2):
        self.series.append((list(xs), list(ys), color, width))

    def hline(self, y, color=DARK, dashed=True, label=None):
        self.hlines.append((y, color, dashed, label))

    def legend(self, items):
        self.items = items

    def _limits(self):
        xs = [v for s in self.series for v in s[0]] or [0, 1]
        ys = [v for s in self.series for v in s[1]] + [h[0] for h in self.hlines] or [0, 1]
        xl = self.xlim or (min(xs), max(xs))
        yl = self.ylim or (0, max(ys) * 1.1 if max(ys) > 0 else 1)
        if xl[1] <= xl[0]:
            xl = (xl[0], xl[0] + 1)
        if yl[1] <= yl[0]:
            yl = (yl[0], yl[0] + 1)
        return xl, yl

    def draw(self):
        f = self.fig
        (xa, xb), (ya, yb) = self._limits()

        def px(x):
            return self.x0 + (x - xa) / (xb - xa) * (self.x1 - self.x0)

        def py(y):
            return self.y1 - (y - ya) / (yb - ya) * (self.y1 - self.y0)

        # grid and ticks
        st = _nice_step(xb - xa, 8)
        t = (xa // st) * st
        while t <= xb + 1e-9:
            if t >= xa - 1e-9:
                f.line(px(t), self.y0, px(t), self.y1, GREY)
                lab = _fmt(t)
                f.text(int(px(t)) - f.text_width(lab) // 2, self.y1 + 6, lab)
            t += st
        st = _nice_step(yb - ya, 5)
        t = (ya // st) * st
        while t <= yb + 1e-9:
            if t >= ya - 1e-9:
                f.line(self.x0, py(t), self.x1, py(t), GREY)
                lab = _fmt(t)
                f.text(self.x0 - 6 - f.text_width(lab), int(py(t)) - 3, lab)
            t += st
        for y, c, dashed, label in self.hlines:
            if ya <= y <= yb:
                f.line(self.x0, py(y), self.x1, py(y), c, width=1, dashed=dashed)
                if label:
                    f.text(self.x1 - f.text_width(label) - 4, int(py(y)) - 10, label, c)
        # the data, clipped to the panel
        for xs, ys, c, w in self.series:
            prev = None
            for x, y in zip(xs, ys):
                if y is None or not xa <= x <= xb:
                    prev = None
                    continue
                p = (px(x), py(min(max(y, ya), yb)))
                if prev:
                    f.line(prev[0], prev[1], p[0], p[1], c, width=w)
                prev = p
        # frame, labels, legend
        for a, b, c, d in ((self.x0, self.y0, self.x1, self.y0), (self.x0, self.y1, self.x1, self.y1),
                           (self.x0, self.y0, self.x0, self.y1), (self.x1, self.y0, self.x1, self.y1)):
            f.line(a, b, c, d, BLACK)
        f.text(self.x0, self.y0 - 16, self.title, BLACK, scale=1)
        f.text((self.x0 + self.x1) // 2 - f.text_width(self.xlabel) // 2, self.y1 + 18, self.xlabel)
        f.text(self.x0 - 54, (self.y0 + self.y1) // 2 + f.text_width(self.ylabel) // 2, self.ylabel,
               vertical=True)
        ly = self.y0
        for label, c in self.items:
            f.rect(self.x1 + 10, ly + 1, self.x1 + 24, ly + 6, c)
            f.text(self.x1 + 28, ly, label)
            ly += 12
