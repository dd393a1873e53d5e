"""A baseline JPEG of noise of about the size asked for, as a phone photo weighs (it compresses no further), written
fast in plain Python: random quantized coefficients instead of a DCT, one restart interval per MCU so that each MCU's
entropy-coded bytes stand alone and a few dozen of them, made once, fill any size. Every decoder reads it (FFmpeg's
mjpeg, libjpeg, browsers); the picture is coloured noise at full 4:4:4 resolution.

    jpeg_noise(5 << 20) -> bytes of a ~5 MB JPEG"""
import random
import struct

# Huffman tables of our own (any canonical table is valid): DC has one symbol, size 0 (every DC difference is 0),
# coded "00"; AC has nine symbols of 4 bits each, 0x00 (end of block, unused) and 0x01 .. 0x08 (a run of 0 zeros,
# then a coefficient of 1 .. 8 bits), coded as their own value.
DC_COUNTS = [0, 1] + [0] * 14
DC_SYMBOLS = [0]
AC_COUNTS = [0, 0, 0, 9] + [0] * 12
AC_SYMBOLS = list(range(9))


class _Bits:
    def __init__(self):
        self.out = bytearray()
        self.acc = 0
        self.n = 0

    def put(self, value, bits):
        self.acc = (self.acc << bits) | value
        self.n += bits
        while self.n >= 8:
            self.n -= 8
            byte = (self.acc >> self.n) & 0xFF
            self.out.append(byte)
            if byte == 0xFF:
                self.out.append(0)  # byte stuffing
        self.acc &= (1 << self.n) - 1

    def flush(self):
        if self.n:
            self.put((1 << (8 - self.n)) - 1, 8 - self.n)  # pad with ones to the byte
        return bytes(self.out)


def _mcu(rng):
    """One MCU (a Y, a Cb and a Cr block) of random coefficients, byte-aligned."""
    b = _Bits()
    for _ in range(3):
        b.put(0b00, 2)  # DC difference 0
        for _ in range(63):
            size = rng.randint(1, 8)
            b.put(size, 4)
            b.put(rng.getrandbits(size), size)
    return b.flush()


def _segment(marker, payload):
    return struct.pack(">BBH", 0xFF, marker, len(payload) + 2) + payload


def jpeg_noise(size, seed=1):
    rng = random.Random(seed)
    mcus = [_mcu(rng) for _ in range(64)]
    per_mcu = sum(len(m) for m in mcus) / len(mcus) + 2  # and its restart marker
    blocks = max(1, int(size / per_mcu))
    across = max(1, int((blocks * 16 / 9) ** 0.5))  # 16:9, as a phone photo in landscape
    down = max(1, blocks // across)
    width, height, n = 8 * across, 8 * down, across * down
    out = bytearray(b"\xff\xd8")
    out += _segment(0xDB, b"\x00" + b"\x01" * 64)  # quantization table 0: all ones
    out += _segment(0xC0, struct.pack(">BHHB", 8, height, width, 3) + b"".join(
        struct.pack(">BBB", c, 0x11, 0) for c in (1, 2, 3)))
    out += _segment(0xC4, b"\x00" + bytes(DC_COUNTS) + bytes(DC_SYMBOLS))
    out += _segment(0xC4, b"\x10" + bytes(AC_COUNTS) + bytes(AC_SYMBOLS))
    out += _segment(0xDD, struct.pack(">H", 1))  # a restart interval of one MCU
    out += _segment(0xDA, struct.pack(">B", 3) + b"".join(struct.pack(">BB", c, 0x00) for c in (1, 2, 3)) +
                    b"\x00\x3f\x00")
    for i in range(n):
        out += mcus[i % len(mcus)]
        if i + 1 < n:
            out += bytes((0xFF, 0xD0 + i % 8))
    out += b"\xff\xd9"
    return bytes(out)


if __name__ == "__main__":
    import sys
    data = jpeg_noise(int(sys.argv[2]) if len(sys.argv) > 2 else 5 << 20)
    with open(sys.argv[1], "wb") as f:
        f.write(data)
