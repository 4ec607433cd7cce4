package spinetest

// PNGSource is Python that defines png(w, h, rgb=(200, 30, 30), seed=0): the
// bytes of a w x h PNG made by hand (zlib and struct, no imaging package,
// so in every Guest), one colour, or noise when seed is set. A program
// starts with it to write or display images.
const PNGSource = `import random as _random, struct as _struct, zlib as _zlib
def png(w, h, rgb=(200, 30, 30), seed=0):
    rows = []
    rng = _random.Random(seed)
    for _ in range(h):
        row = bytes(rng.getrandbits(8) for _ in range(3 * w)) if seed else bytes(rgb) * w
        rows.append(b"\x00" + row)
    def chunk(kind, data):
        return _struct.pack(">I", len(data)) + kind + data + _struct.pack(">I", _zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", _struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", _zlib.compress(b"".join(rows))) + chunk(b"IEND", b""))
`
