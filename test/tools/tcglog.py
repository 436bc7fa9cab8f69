#!/usr/bin/env python3
"""tcglog.py: write TCG PC Client crypto-agile event logs and IMA binary
measurement lists (little-endian, struct only) for the tests of
bc_join.replay_event_log (test/tap/eventlog.t) and the fuzz seeds
(test/fuzz/corpus/fuzz_eventlog/).

  tcglog.py log NAME OUT       write the log scenario NAME (see LOGS) to OUT
  tcglog.py extends NAME       print "pcr sha1=HEX,sha256=HEX" per extended event
                               (the argument of tpm2_pcrextend), NO_ACTION skipped
  tcglog.py replay NAME        print "bank pcr hex" for every PCR the log extends,
                               computed here (hashlib), PCR 0's locality and the
                               0xff start of PCRs 17..22 included
  tcglog.py ima NAME OUT       write the IMA list scenario NAME (see IMA) to OUT
  tcglog.py ima-extends NAME BANKS  print "10:bank=HEX,..." per entry as the kernel
                               (5.8 and later) extends it: H_bank(template data),
                               all 0xff for a violation
  tcglog.py ima-pcr10 NAME BANK  print PCR 10 replayed here for that bank
  tcglog.py names              print the log scenario names
"""
import hashlib
import struct
import sys

ALGS = {"sha1": (0x0004, 20), "sha256": (0x000B, 32), "sha384": (0x000C, 48), "sha512": (0x000D, 64)}
EV_NO_ACTION = 3


def spec_id(banks, vendor=b""):
    """The first event: TCG_PCR_EVENT, PCR 0, EV_NO_ACTION, zero digest, the SpecID data."""
    d = b"Spec ID Event03\0" + struct.pack("<IBBBBI", 0, 0, 2, 0, 2, len(banks))
    for b in banks:
        d += struct.pack("<HH", *ALGS[b])
    d += struct.pack("<B", len(vendor)) + vendor
    return struct.pack("<II20sI", 0, EV_NO_ACTION, b"\0" * 20, len(d)) + d


def event2(banks, pcr, etype, data, digests=None):
    """A TCG_PCR_EVENT2 whose digests are H_bank(data), or digests[bank] where given
    (an event whose digest is not its data's, as test/agent/attestlib.py logs a drift)."""
    out = struct.pack("<III", pcr, etype, len(banks))
    for b in banks:
        out += struct.pack("<H", ALGS[b][0]) + (digests or {}).get(b, hashlib.new(b, data).digest())
    return out + struct.pack("<I", len(data)) + data


def efi_var(name, data):
    """UEFI_VARIABLE_DATA: VariableName GUID, name length, data length, UCS-2 name, data."""
    return (b"\x61\xdf\xe4\x8b\xca\x93\xd2\x11\xaa\x0d\x00\xe0\x98\x03\x2b\x8c"
            + struct.pack("<QQ", len(name), len(data)) + name.encode("utf-16-le") + data)


def image_load(n):
    """UEFI_IMAGE_LOAD_EVENT: location, length, link address, device path (its end node)."""
    dp = b"\x7f\xff\x04\x00"
    return struct.pack("<QQQQ", 0x10000 * (n + 1), 0x2000, 0, len(dp)) + dp


def boot_events(n_apps=2):
    """A plausible UEFI boot: CRTM, firmware, Secure Boot variables, shim, grub, kernel, separators."""
    ev = [(0, 0x00000008, "CRTM 1.0\0".encode("utf-16-le")),
          (0, 0x80000008, struct.pack("<QQ", 0xff800000, 0x200000)),
          (7, 0x80000001, efi_var("SecureBoot", b"\x01")),
          (7, 0x80000001, efi_var("Custom", b"\x30\x82" * 20)),
          (1, 0x80000002, efi_var("BootOrder", b"\x01\x00\x00\x00")),
          (4, 0x80000007, b"Calling EFI Application from Boot Option"),
          (2, 0x80000004, image_load(99)),
          (7, 0x800000E0, efi_var("Shim", b"\x00" * 16 + b"cert")),
          (14, 0x0000000D, b"MokList\0"),
          (8, 0x0000000D, b"grub_cmd: linux /vmlinuz root=/dev/sda1 ro quiet\0"),
          (9, 0x0000000D, b"/boot/initrd.img\0")]
    for i in range(n_apps):
        ev.append((4, 0x80000003, image_load(i)))
    for p in range(8):
        ev.append((p, 0x00000004, b"\0\0\0\0"))
    ev.append((5, 0x80000007, b"Exit Boot Services Invocation"))
    return ev


def locality_event(loc):
    return (0, EV_NO_ACTION, b"StartupLocality\0" + bytes([loc]))


# scenario -> (banks, events)
LOGS = {
    "boot": (["sha1", "sha256"], boot_events()),
    "sha256only": (["sha256"], boot_events(5)),
    "fourbanks": (["sha1", "sha256", "sha384", "sha512"], boot_events(1)),
    # tpm2_eventlog 5.4 extends EV_NO_ACTION events and ignores StartupLocality:
    # these two are where it and the spec (and a real TPM) part ways
    "noaction": (["sha1", "sha256"], boot_events()[:2] + [(0, EV_NO_ACTION, b"SP800-155 Event\0info")] + boot_events()[2:]),
    "locality3": (["sha1", "sha256"], [locality_event(3)] + boot_events()),
    "drtm": (["sha256"], boot_events() + [(17, 0x00000005, b"txt acm"), (18, 0x00000005, b"mle")]),
    "separators": (["sha256"], [(p, 0x00000004, b"\0\0\0\0") for p in range(24)]),
    "empty": (["sha1", "sha256"], []),
}


def write_log(name):
    banks, events = LOGS[name]
    return spec_id(banks) + b"".join(event2(banks, *e) for e in events)


def replay(name):
    banks, events = LOGS[name]
    loc = 0
    for pcr, t, d in events:
        if t == EV_NO_ACTION and pcr == 0 and len(d) == 17 and d.startswith(b"StartupLocality\0"):
            loc = d[16]
    out = {}
    for b in banks:
        size = ALGS[b][1]
        pcrs = {}
        for pcr, t, d in events:
            if t == EV_NO_ACTION:
                continue
            if pcr not in pcrs:
                start = b"\xff" * size if 17 <= pcr <= 22 else b"\0" * size
                if pcr == 0:
                    start = b"\0" * (size - 1) + bytes([loc])
                pcrs[pcr] = start
            pcrs[pcr] = hashlib.new(b, pcrs[pcr] + hashlib.new(b, d).digest()).digest()
        out[b] = pcrs
    return out


def ima_entry(path, tmpl="ima-ng", alg="sha256", third=None, zero=False, pcr=10):
    """One binary list entry; its file digest is H_alg(path), its listed hash SHA-1(template data)."""
    fd = hashlib.new(alg, path).digest()
    dng = alg.encode() + b":\0" + fd
    data = struct.pack("<I", len(dng)) + dng + struct.pack("<I", len(path) + 1) + path + b"\0"
    if third is not None:
        data += struct.pack("<I", len(third)) + third
    th = b"\0" * 20 if zero else hashlib.sha1(data).digest()
    return struct.pack("<I20sI", pcr, th, len(tmpl)) + tmpl.encode() + struct.pack("<I", len(data)) + data, data, zero


IMA = {
    "ima": [ima_entry(b"boot_aggregate"), ima_entry(b"/usr/bin/bash"),
            ima_entry(b"/usr/lib/x86_64-linux-gnu/libc.so.6", "ima-sig", third=b""),
            ima_entry(b"kernel_cmdline", "ima-buf", third=b"ro quiet"),
            ima_entry(b"/var/log/opened-for-write"), ima_entry(b"/etc/passwd", zero=True),
            ima_entry(b"/usr/bin/with space", alg="sha1")],
}


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "log":
        open(argv[3], "wb").write(write_log(argv[2]))
    elif cmd == "names":
        print("\n".join(LOGS))
    elif cmd == "extends":
        banks, events = LOGS[argv[2]]
        for pcr, t, d in events:
            if t != EV_NO_ACTION:
                print("%d:%s" % (pcr, ",".join("%s=%s" % (b, hashlib.new(b, d).hexdigest()) for b in banks)))
    elif cmd == "replay":
        for b, pcrs in replay(argv[2]).items():
            for p in sorted(pcrs):
                print(b, p, pcrs[p].hex())
    elif cmd == "ima":
        open(argv[3], "wb").write(b"".join(e[0] for e in IMA[argv[2]]))
    elif cmd == "ima-extends":
        for raw, data, zero in IMA[argv[2]]:
            print("10:" + ",".join("%s=%s" % (b, ("ff" * ALGS[b][1]) if zero else hashlib.new(b, data).hexdigest())
                                   for b in argv[3].split(",")))
    elif cmd == "ima-pcr10":
        b = argv[3]
        size = ALGS[b][1]
        v = b"\0" * size
        for raw, data, zero in IMA[argv[2]]:
            v = hashlib.new(b, v + (b"\xff" * size if zero else hashlib.new(b, data).digest())).digest()
        print(v.hex())
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
