"""Sequential write through the Python file object
(scripts/bench-bindings.sh): format, write TOTAL bytes in CHUNK-byte
writes, fsync, unmount; print the seconds from the first write to the end
of the fsync.

    python3 examples/python/seqwrite.py PATH TOTAL CHUNK
"""

import os
import sys
import time

import mballoc

path, total, chunk = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if os.path.exists(path):
    os.unlink(path)
mballoc.format(path, size=total * 2)
buf = bytes((i * 7 + 3) & 0xFF for i in range(chunk))
with mballoc.mount(path) as vol:
    with vol.open("/seq", "wb") as f:
        t = time.perf_counter()
        done = 0
        while done < total:
            f.write(buf)
            done += chunk
        f.fsync()
        secs = time.perf_counter() - t
print(f"{secs:.4f}")
