"""Random O_DIRECT reads of SIZE bytes from FILE with DEPTH threads for SECONDS (disk bandwidth at a
request size, for the expert-cache figures): python3 bench/randread.py FILE SIZE DEPTH SECONDS."""
import os, sys, mmap, random, time, threading
path, size, depth, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
fsize = os.path.getsize(path)
total = [0]; lock = threading.Lock(); stop = time.time() + secs
def worker(seed):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, size)
    r = random.Random(seed); n = 0
    while time.time() < stop:
        off = r.randrange(0, (fsize - size) // 4096) * 4096
        n += os.preadv(fd, [buf], off)
    with lock: total[0] += n
    os.close(fd)
t0 = time.time()
ts = [threading.Thread(target=worker, args=(i,)) for i in range(depth)]
[t.start() for t in ts]; [t.join() for t in ts]
el = time.time() - t0
print(f"{size} B x depth {depth}: {total[0]/el/1e9:.3f} GB/s ({total[0]/size/el:.0f} IOPS)")
