# A Python workload for the e2e test: dicts, lists, strings, JSON, sorting,
# classes, generators and threads. Prints a digest of everything it built,
# which must not depend on the allocator.
import hashlib
import json
import threading

digest = hashlib.sha256()

# Dicts and lists of strings.
table = {}
for i in range(200000):
    table["key-%d" % i] = [i, str(i * 7), "v" * (i % 50)]
for i in range(0, 200000, 3):
    del table["key-%d" % i]
digest.update(str(len(table)).encode())

# JSON round trip of a nested structure.
doc = {"items": [{"id": i, "name": "item %d" % i, "tags": ["t%d" % (i % 7), "x" * (i % 13)],
                  "nested": {"a": i / 3.0, "b": [i, i + 1, None, True]}} for i in range(30000)]}
text = json.dumps(doc, sort_keys=True)
back = json.loads(text)
assert back == doc
digest.update(hashlib.sha256(text.encode()).digest())

# Sorting and string building.
words = sorted(("%08x" % ((i * 2654435761) % 2**32)) for i in range(100000))
digest.update("".join(words[::97]).encode())

# Objects with reference cycles (the cycle collector frees them).
class Node:
    def __init__(self, value):
        self.value = value
        self.peer = None
        self.payload = bytearray(value % 300)

for round_ in range(20):
    nodes = [Node(i) for i in range(5000)]
    for a, b in zip(nodes, nodes[1:]):
        a.peer, b.peer = b, a
    digest.update(str(sum(len(n.payload) for n in nodes)).encode())
    del nodes

# Threads building and dropping data concurrently (objects cross threads).
results = [None] * 8
shared = []
lock = threading.Lock()

def worker(k):
    local = {}
    for i in range(40000):
        local[i] = ("w%d-%d" % (k, i)) * (1 + i % 4)
        if i % 100 == 0:
            with lock:
                shared.append(local.pop(i))
    results[k] = sum(len(v) for v in local.values())

threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
digest.update(str(results).encode())
digest.update(str(sorted(len(s) for s in shared)).encode())

print("python workload:", digest.hexdigest())
