# Lists the device code a CUDA executable carries: "sm_80 cubin", "compute_90 ptx", ... one per line.
"""Reads the ELF's .nv_fatbin section (no cuobjdump: the toolkit here ships without it).

A fat binary is a 16-byte header (magic 0xBA55ED50, u16 version, u16 header size, u64 size of the
entries) followed by entries, each a header (u16 kind: 1 PTX, 2 cubin; u16; u32 header size;
u64 payload size; ...; u32 arch at offset 28, 80 for sm_80) and its payload. A linked program
holds one fat binary per translation unit with device code, back to back (aligned to 8 bytes).

usage: fatbin_archs.py EXECUTABLE
"""
import struct
import subprocess
import sys
import tempfile

MAGIC = 0xBA55ED50
KINDS = {1: "ptx", 2: "cubin"}


def fatbin_section(path):
    with tempfile.NamedTemporaryFile() as out:
        subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", path, out.name],
                       check=True)
        return open(out.name, "rb").read()


def device_code(data):
    """Counts of (kind, arch) over every fat binary in the section."""
    found = {}
    offset = 0
    while offset + 16 <= len(data):
        magic, _, header_size, entries_size = struct.unpack_from("<IHHQ", data, offset)
        if magic != MAGIC:
            offset += 8
            continue
        entry, end = offset + header_size, offset + header_size + entries_size
        while entry < end:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", data, entry)
            arch = struct.unpack_from("<I", data, entry + 28)[0]
            key = (KINDS.get(kind, f"kind{kind}"), arch)
            found[key] = found.get(key, 0) + 1
            entry += entry_header + payload
        offset = end
    return found


def main():
    found = device_code(fatbin_section(sys.argv[1]))
    if not found:
        sys.exit(f"{sys.argv[1]}: no fat binary in .nv_fatbin")
    for (kind, arch), count in sorted(found.items()):
        prefix = "compute" if kind == "ptx" else "sm"
        print(f"{prefix}_{arch} {kind} {count}")


if __name__ == "__main__":
    main()
