#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Read a TensorBoard event file the way TensorFlow's record reader does,
with no code of accel's: TFRecord framing (uint64 length, masked CRC-32C
of the length, data, masked CRC-32C of the data; every CRC checked) around
tensorflow.Event protobufs decoded from the wire format by hand.

Usage: tb_read.py FILE  ->  prints one JSON line per scalar:
  {"step": S, "wall_time": T, "tag": "loss", "value": V}
and the file_version on stderr.  Exit 1 on any framing or CRC error.

With --tensorboard it reads the file through the tensorboard package's own
event loader instead (exit 77 when the package is not installed)."""
import json
import struct
import sys


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, i):
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def fields(buf):
    """(field number, wire type, value) of a protobuf message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 1:
            v = buf[i:i + 8]
            i += 8
        elif wt == 2:
            n, i = varint(buf, i)
            v = buf[i:i + n]
            i += n
        elif wt == 5:
            v = buf[i:i + 4]
            i += 4
        else:
            raise ValueError("wire type %d at byte %d" % (wt, i))
        if i > len(buf):
            raise ValueError("field %d runs past the message" % num)
        yield num, wt, v


def records(path):
    with open(path, "rb") as f:
        data = f.read()
    i = 0
    while i < len(data):
        if i + 12 > len(data):
            raise ValueError("truncated record header at byte %d" % i)
        head = data[i:i + 8]
        (n,) = struct.unpack("<Q", head)
        (crc,) = struct.unpack("<I", data[i + 8:i + 12])
        if crc != masked(head):
            raise ValueError("length CRC mismatch at byte %d" % i)
        body = data[i + 12:i + 12 + n]
        if len(body) != n or i + 16 + n > len(data):
            raise ValueError("truncated record at byte %d" % i)
        (crc,) = struct.unpack("<I", data[i + 12 + n:i + 16 + n])
        if crc != masked(body):
            raise ValueError("data CRC mismatch at byte %d" % i)
        yield body
        i += 16 + n


def main_ours(path):
    for body in records(path):
        wall, step, version, values = None, 0, None, []
        for num, wt, v in fields(body):
            if num == 1 and wt == 1:
                (wall,) = struct.unpack("<d", v)
            elif num == 2 and wt == 0:
                step = v - (1 << 64) if v >= 1 << 63 else v
            elif num == 3 and wt == 2:
                version = v.decode()
            elif num == 5 and wt == 2:
                for snum, swt, sv in fields(v):
                    if snum != 1 or swt != 2:
                        continue
                    tag, val = None, None
                    for vnum, vwt, vv in fields(sv):
                        if vnum == 1 and vwt == 2:
                            tag = vv.decode()
                        elif vnum == 2 and vwt == 5:
                            (val,) = struct.unpack("<f", vv)
                    values.append((tag, val))
        if wall is None:
            raise ValueError("an event without wall_time")
        if version is not None:
            print("file_version", version, file=sys.stderr)
        for tag, val in values:
            print(json.dumps({"step": step, "wall_time": wall, "tag": tag, "value": val}))
    return 0


def main_tensorboard(path):
    try:
        from tensorboard.backend.event_processing import event_file_loader
    except ImportError:
        print("skipped: the tensorboard package is not installed", file=sys.stderr)
        return 77
    for ev in event_file_loader.LegacyEventFileLoader(path).Load():
        if ev.HasField("file_version"):
            print("file_version", ev.file_version, file=sys.stderr)
        for v in ev.summary.value:
            print(json.dumps({"step": ev.step, "wall_time": ev.wall_time, "tag": v.tag,
                              "value": v.simple_value}))
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "--tensorboard":
        sys.exit(main_tensorboard(args[1]))
    try:
        sys.exit(main_ours(args[0]))
    except ValueError as e:
        print("tb_read: %s: %s" % (args[0], e), file=sys.stderr)
        sys.exit(1)
