"""A Python workload for the bench suite: the allocation pattern of an
ordinary Python program (dicts, lists, strings, tuples; JSON encode and
decode; sorting), driven by a fixed seed. Run by Debian's python3 under each
allocator (the interpreter's small-object allocator serves objects up to
512 bytes from arenas it gets from malloc; larger objects, strings and
containers' arrays come from malloc directly).

usage: py_workload.py [scale=1.0]
prints: records, checksum (the same under every allocator), time_s."""

import json
import random
import sys
import time


def main() -> None:
    scale = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    rng = random.Random(1)
    start = time.monotonic()
    checksum = 0
    records = 0
    for batch in range(int(40 * scale)):
        rows = []
        for i in range(5000):
            tags = ["t%d" % rng.randrange(500) for _ in range(rng.randrange(8))]
            body = "x" * rng.randrange(4000) if rng.random() < 0.1 else "y" * rng.randrange(60)
            rows.append({"id": batch * 5000 + i, "name": "user%d" % rng.randrange(10000),
                         "tags": tags, "score": rng.random(), "body": body})
        text = json.dumps(rows)
        parsed = json.loads(text)
        parsed.sort(key=lambda r: (r["name"], -r["score"]))
        index = {}
        for r in parsed:
            for t in r["tags"]:
                index.setdefault(t, []).append(r["id"])
        checksum = (checksum * 31 + len(text) + len(index) + sum(len(v) for v in index.values())) % (1 << 61)
        records += len(parsed)
    print("records=%d" % records)
    print("checksum=%d" % checksum)
    print("time_s=%.6f" % (time.monotonic() - start))


if __name__ == "__main__":
    main()
