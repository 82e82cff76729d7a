# The shadow corpus's Python program: objects of many sizes allocated and freed on several threads, so that
# pymalloc's arenas, glibc's per-thread arenas (mmap'd heaps, trimmed with madvise and mprotect) and large
# mmap'd blocks all come and go.
import threading

SIZES = [8, 64, 500, 4096, 70_000, 300_000, 2_000_000]


def work(seed):
    keep = []
    for i in range(3000):
        n = SIZES[(i * 7 + seed) % len(SIZES)]
        keep.append(bytearray(n))
        if len(keep) > 40:
            del keep[: len(keep) // 2]
    d = {j: str(j) * 3 for j in range(20000 + seed)}
    return len(d) + len(keep)


threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
big = [bytes(1 << 20) for _ in range(32)]
del big
print("ok")
