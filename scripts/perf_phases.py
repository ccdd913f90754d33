#!/usr/bin/env python3
"""Attributes the samples of `perf script` (stdin, recorded with call graphs) to phases of the
broker's request path: each sample goes to the first phase whose pattern matches any frame of its
stack, in the order below (so a page fault inside the read buffer's zero-fill counts as
zero-fill). Used by scripts/profile.sh; the README quotes its output."""

import collections
import re
import sys

PHASES = [
    ("fetch: zero-fill of a fresh read buffer", r"__memset"),
    ("fetch: pread of segment bytes", r"read_exact_at|FileExt::read_at|__libc_pread|pread64"),
    ("encode response (copy into the response buffer)", r"encode_response|Encodable"),
    ("socket write", r"write_responses|tcp_sendmsg|sock_write_iter"),
    ("socket read and framing", r"read_frame|tcp_recvmsg|sock_read_iter"),
    ("request decode", r"Decodable|decode_request_header"),
    ("fdatasync", r"fdatasync|sync_data|__x64_sys_fdatasync"),
    ("append: pwrite to the page cache", r"write_all_at|pwrite|vfs_write"),
    ("append: validation and CRC-32C", r"validate_request|crc32c"),
    ("produce handler (rest)", r"api::produce"),
    ("fetch handler (rest)", r"api::fetch|Scanner|whole_batches"),
    ("scheduling: wakeups, parking, context switches", r"epoll_wait|park|futex|schedule|finish_task_switch|Condvar"),
]


def main() -> None:
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    stack: list[str] = []

    def flush() -> None:
        nonlocal total
        if not stack:
            return
        total += 1
        joined = "\n".join(stack)
        name = next((n for n, rx in PHASES if re.search(rx, joined)), "other")
        counts[name] += 1

    for line in sys.stdin:
        if not line.strip():
            flush()
            stack.clear()
        elif line[0] in " \t":
            stack.append(line.strip())
    flush()
    print(f"{total} samples")
    for name, n in counts.most_common():
        print(f"{100 * n / max(total, 1):6.1f}%  {name}")


if __name__ == "__main__":
    main()
