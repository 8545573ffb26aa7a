"""A checkpoint's shard files and the page cache, for the benchmarks that measure cold loads."""
import os


def shards(d):
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".safetensors"))


def evict(d):
    """Drops the shards' pages from the page cache (after writing back dirty ones)."""
    os.sync()
    for path in shards(d):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
